package aibrixpdpair

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/pdgate/pdgate/plugins/aibrix/internal/decodepolicy"
	"github.com/pdgate/pdgate/plugins/aibrix/internal/prefillpolicy"
	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

func metricsOf(p *podmodel.Pod) *engineattr.Metrics {
	if p.Endpoint == nil {
		return nil
	}
	return engineattr.Get(p.Endpoint)
}

func usesLedger(k pdknobs.Knobs) bool {
	return k.PrefillScorePolicy == pdknobs.PrefillTokenLoad || k.PrefillScorePolicy == pdknobs.PrefillHybridCacheLoad ||
		k.DecodeScorePolicy == pdknobs.DecodeTokenLoad
}

// selectLocked runs steps that read shared state, atomically with registering the pick.
func (s *Selector) selectLocked(in Input, d Decision, eligible []*group, combined []*podmodel.Pod) (Decision, error) {
	// Request-only preparation stays outside the lock (AIBrix prepares the prefill scorer first).
	var prompt prefillpolicy.Prompt
	if s.Prefix != nil && in.Knobs.PrefillScorePolicy != pdknobs.PrefillLeastRequest && in.Knobs.PrefillScorePolicy != pdknobs.PrefillTokenLoad {
		prompt = s.Prefix.Prompt(in.promptText())
	}
	var ledger tokenload.Ledger
	var defs tokenload.Defaults
	k := in.Knobs
	if usesLedger(k) {
		var err error
		if s.Ledger != nil {
			ledger, defs, err = s.Ledger()
		} else {
			err = fmt.Errorf("no token ledger configured")
		}
		if err != nil {
			// No ledger: degrade to the AIBrix defaults rather than failing every request.
			s.warn(fmt.Sprintf("token policies need a pd-token-ledger (%v); using %s/%s", err, pdknobs.PrefillPrefixCache, pdknobs.DecodeLoadBalancing))
			if k.PrefillScorePolicy == pdknobs.PrefillTokenLoad || k.PrefillScorePolicy == pdknobs.PrefillHybridCacheLoad {
				k.PrefillScorePolicy = pdknobs.PrefillPrefixCache
				prompt = s.Prefix.Prompt(in.promptText())
			}
			if k.DecodeScorePolicy == pdknobs.DecodeTokenLoad {
				k.DecodeScorePolicy = pdknobs.DecodeLoadBalancing
			}
			d.LedgerMissing = true
			d.PrefillPolicy, d.DecodePolicy = k.PrefillScorePolicy, k.DecodeScorePolicy
		}
	}
	in.Knobs = k

	// The prefix table is read before and written after the critical section: matching and
	// recording a 220 KB prompt compares and copies its text, and holding the selection lock
	// for it serialised every request (the table has its own lock, and a concurrent request
	// seeing the table a moment early or late only moves a prefix score, never a ledger charge).
	pv := prefixView{prompt: prompt}
	if prompt.Blocks() > 0 {
		match := matchPool.Get().(map[string]float64)
		defer func() { clear(match); matchPool.Put(match) }()
		s.Prefix.MatchInto(match, prompt)
		pv.match = match
	}
	out, err := s.critical(in, d, eligible, combined, pv, ledger, defs)
	if err == nil {
		if out.prefixHolder != "" {
			s.Prefix.Add(out.prefixHolder, prompt)
		}
	}
	return out, err
}

// matchPool holds the maps of the pods' match percents, one per selection in flight: the
// match is computed outside the selection lock, so concurrent requests need maps of their
// own, and a new map per request was an allocation for the map and one for its entries.
var matchPool = sync.Pool{New: func() any { return map[string]float64{} }}

// prefixView is the prompt prepared for the prefix table and each pod's match percent,
// computed before the selection lock is taken.
type prefixView struct {
	prompt prefillpolicy.Prompt
	match  map[string]float64
}

// critical runs the cascade under the selection lock, inside the ledger's Atomically when a
// token policy reads it.
func (s *Selector) critical(in Input, d Decision, eligible []*group, combined []*podmodel.Pod, pv prefixView,
	ledger tokenload.Ledger, defs tokenload.Defaults) (Decision, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ledger != nil {
		c := &s.call
		if c.run == nil {
			c.run = func(tx tokenload.Tx) {
				c.out, c.err = s.cascade(c.in, c.d, c.eligible, c.combined, c.pv, c.ledger, tx, c.defs)
			}
		}
		c.in, c.d, c.eligible, c.combined, c.pv, c.ledger, c.defs = in, d, eligible, combined, pv, ledger, defs
		ledger.Atomically(c.run)
		out, err := c.out, c.err
		*c = ledgerCall{run: c.run} // the selector keeps nothing of the request
		return out, err
	}
	return s.cascade(in, d, eligible, combined, pv, nil, nil, defs)
}

// ledgerCall carries the cascade's arguments and results through the ledger's Atomically.
// The selector owns one, used under its lock, with the function Atomically runs bound to it
// once: a closure over the arguments moved them to the heap, five allocations per request, and
// since the escape is decided per function, requests without a ledger paid four of them too.
type ledgerCall struct {
	in       Input
	d        Decision
	eligible []*group
	combined []*podmodel.Pod
	pv       prefixView
	ledger   tokenload.Ledger
	defs     tokenload.Defaults
	out      Decision
	err      error
	run      func(tx tokenload.Tx)
}

func (s *Selector) warn(msg string) {
	if s.Warn != nil {
		s.Warn(msg)
	}
}

func (s *Selector) shufflePods(p []*podmodel.Pod) []*podmodel.Pod {
	return s.shuffleInPlace(append([]*podmodel.Pod(nil), p...))
}

// shuffleInPlace shuffles a slice the caller owns.
func (s *Selector) shuffleInPlace(p []*podmodel.Pod) []*podmodel.Pod {
	s.rng.Shuffle(len(p), func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}

// cascade: combined overflow, prefill fast path, decode fast path, bucket band, scoring, pair.
func (s *Selector) cascade(in Input, d Decision, eligible []*group, combined []*podmodel.Pod, pv prefixView,
	ledger tokenload.Ledger, tx tokenload.Tx, defs tokenload.Defaults) (Decision, error) {
	k := in.Knobs
	// Callers test in.Explain first: the arguments of a call would be boxed into interfaces,
	// an allocation each, on every request whether or not a note is kept.
	note := func(format string, args ...any) { d.Notes = append(d.Notes, fmt.Sprintf(format, args...)) }

	sc := &s.scratch
	defer sc.reset()
	nDecode := 0
	prefill, decode := sc.prefill[:0], sc.decode[:0]
	for _, g := range eligible {
		prefill = append(prefill, g.prefill...)
		decode = append(decode, g.decode...)
	}
	sc.prefill, sc.decode, nDecode = prefill, decode, len(decode)
	prefill, decode = s.shuffleInPlace(prefill), s.shuffleInPlace(decode)

	if len(combined) > 0 {
		if pick, why := s.shouldPickCombined(combined, prefill, decode); pick != nil {
			s.Tracker.Register(in.RequestID, "", pick.Key)
			d.Decode, d.Combined, d.Cause, d.Reason = *pick, true, contract.CauseOverflow, why
			return d, nil
		} else if why != "" && in.Explain {
			note("%s", why)
		}
	}

	// Cache affinity (with a prefill decider): when the decider would keep the request on some
	// decode pods because they already hold its prompt, only those serve it; any other would
	// need a remote prefill. Short prompts (no pod needs one) keep every candidate.
	if in.PrefillNeeded != nil {
		cached := sc.cached[:0]
		for _, p := range decode {
			if dec := in.PrefillNeeded(p); !dec.Run && dec.Cause == contract.CauseCached {
				cached = append(cached, p)
			}
		}
		sc.cached = cached
		if len(cached) > 0 && len(cached) < len(decode) {
			// The cached pods' rolesets' prefill pods, roleset by roleset in the order the
			// cached pods name them.
			pf := sc.affinity[:0]
			for i, p := range cached {
				if !slices.ContainsFunc(cached[:i], func(q *podmodel.Pod) bool { return q.Roleset == p.Roleset }) {
					pf = appendInRoleset(pf, prefill, p.Roleset)
				}
			}
			sc.affinity = pf
			decode, prefill, d.CacheAffinity = cached, pf, true
			if in.Explain {
				note("cache affinity: %d of %d decode pods hold the prompt", len(cached), nDecode)
			}
		}
	}

	// Prefill load-imbalance fast path.
	counts := resize(&sc.counts, len(prefill))
	for i, p := range prefill {
		counts[i] = s.Tracker.PrefillCount(p.Key)
	}
	if idx, why := prefillpolicy.FastPath(counts, k.PrefillLoadImbalanceMinSpread); len(idx) > 0 {
		pick := prefill[idx[s.rng.Intn(len(idx))]]
		prefill = []*podmodel.Pod{pick}
		decode = inRoleset(decode, pick.Roleset)
		d.PrefillFastPath = true
		if in.Explain {
			note("prefill fast path: %s → %s", why, pick.Key)
		}
	}

	// Decode load-imbalance fast path.
	cands := resize(&sc.cands, len(decode))
	for i, p := range decode {
		cands[i] = decodepolicy.NewCandidate(p.Key, metricsOf(p), s.Tracker.PendingDecode(p.Key))
	}
	if i, why := decodepolicy.FastPath(cands, k); i >= 0 {
		if k.DecodeScorePolicy == pdknobs.DecodeTokenLoad {
			if in.Explain {
				note("decode fast path ignored under token_load: %s", why)
			}
		} else {
			pick := decode[i]
			decode, cands = decode[i:i+1], cands[i:i+1]
			if pf := inRoleset(prefill, pick.Roleset); len(pf) > 0 {
				prefill = pf
			}
			d.DecodeFastPath = true
			if in.Explain {
				note("decode fast path: %s → %s", why, pick.Key)
			}
		}
	}

	// Adaptive bucket band (advisory: only narrows when the banded roleset has both sides).
	if d.BandRoleset != "" || d.BandMax != 0 {
		pf, dc := inRoleset(prefill, d.BandRoleset), inRoleset(decode, d.BandRoleset)
		if len(pf) > 0 && len(dc) > 0 {
			prefill, decode = pf, dc
			cands = candidatesFor(cands, dc)
			if s.Planner != nil {
				s.Planner.RecordBanded(d.BandRoleset, in.PromptTokens)
			}
			if in.Explain {
				note("bucket band → roleset %q (band max %d)", d.BandRoleset, d.BandMax)
			}
		}
	}

	pScores, maxP := s.scorePrefill(in, prefill, pv, tx, defs, &d)
	if len(pScores) == 0 {
		return d, fail(http.StatusServiceUnavailable, contract.CauseNoPair, "target prefill pod is nil")
	}
	dScores, maxD, err := s.scoreDecode(k, decode, cands, tx)
	if err != nil {
		return d, err
	}

	// Final pair: minimum prefill/maxPrefill + decode/maxDecode over rolesets in both maps.
	names := sc.names[:0]
	for name := range pScores {
		if _, ok := dScores[name]; ok {
			names = append(names, name)
		}
	}
	sc.names = names
	if len(names) == 0 {
		return d, fail(http.StatusServiceUnavailable, contract.CauseNoPair, "target decode pod is nil")
	}
	sort.Strings(names)
	s.rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
	wD := 1.0
	if in.DecodeFirst != nil {
		ps := make([]float64, len(names))
		for i, name := range names {
			ps[i] = pScores[name].score
		}
		var at float64
		if wD, at = in.DecodeFirst.weight(ps); wD != 1 {
			if in.Explain {
				note("decode first: prefill score quantile %.4g < %g, decode weighs %g", at, in.DecodeFirst.PrefillScoreBelow, wD)
			}
		}
	}
	var rw map[string]remainingCost
	var maxRW float64
	if in.RemainingWork != nil {
		if rw, maxRW = s.remainingWork(in, names, pScores, dScores); rw != nil {
			wD = in.RemainingWork.decodeWeight()
			if in.Explain {
				note("remaining work: some pod holds part of the prompt or some pair's prefill pod is past the TTFT target, decode weighs %g", wD)
			}
		}
	}
	best, bestScore, found := "", math.Inf(1), false
	for _, name := range names {
		pScore, pMax := pScores[name].score, maxP
		if rw != nil {
			pScore, pMax = rw[name].cost, maxRW
			if in.Explain {
				note("pair %q remaining work: %s", name, rw[name])
			}
		}
		f := pScore/pMax + wD*dScores[name].score/maxD
		if in.Explain {
			note("pair %q: prefill %s %.4g/%.4g + %g·decode %s %.4g/%.4g = %.4g", name,
				pScores[name].pod.Key, pScore, pMax, wD, dScores[name].pod.Key, dScores[name].score, maxD, f)
		}
		// NaN (e.g. +Inf/+Inf) never wins, as with AIBrix's strict < against a finite start.
		if !math.IsNaN(f) && (!found || f < bestScore) {
			best, bestScore, found = name, f, true
		}
	}
	if !found {
		return d, fail(http.StatusServiceUnavailable, contract.CauseNoPair, "no roleset has a comparable pair score")
	}
	pp, dd := pScores[best], dScores[best]
	if rc, ok := rw[best]; ok && rc.local {
		// Remaining work: the decode pod holds all but a chunk of the prompt and prefilling
		// that itself beats the best prefill pod's queue and compute.
		d.Decode, d.Roleset, d.DecodeOnly = *dd.pod, best, true
		d.DecodeScore, d.MaxDecodeScore = dd.score, maxD
		d.Cause, d.Reason = contract.CauseCached, "decode-only on "+dd.pod.Key+": remaining work "+rc.String()
		if rc.backedUp {
			d.Cause = contract.CausePrefillBackedUp
		}
		s.Tracker.RegisterLocal(in.RequestID, dd.pod.Key, rc.ud)
		if tx != nil {
			s.charge(in, k, scored{}, dd, ledger, tx, defs)
		}
		return d, nil
	}
	if in.PrefillNeeded != nil {
		if dec := in.PrefillNeeded(dd.pod); !dec.Run {
			// The decider keeps the request on the decode pod: no prefill leg, so nothing is
			// registered or charged on the prefill side and no prefix is recorded for it.
			d.Decode, d.Roleset, d.DecodeOnly = *dd.pod, best, true
			d.DecodeScore, d.MaxDecodeScore = dd.score, maxD
			// Concatenated, not formatted: fmt boxed both strings, an allocation each.
			d.Cause, d.Reason = dec.Cause, "decode-only on "+dd.pod.Key+": "+dec.Reason
			s.Tracker.Register(in.RequestID, "", dd.pod.Key)
			if tx != nil {
				s.charge(in, k, scored{}, dd, ledger, tx, defs)
			}
			return d, nil
		}
	}
	// Copies, not pointers into Input.Pods: the decision outlives the cycle (it is kept until
	// the response header), and a pointer would keep the whole fleet's records alive with it.
	prefillPod := *pp.pod
	d.Prefill, d.Decode, d.Roleset = &prefillPod, *dd.pod, best
	d.PrefillScore, d.DecodeScore, d.FinalScore = pp.score, dd.score, bestScore
	d.MaxPrefillScore, d.MaxDecodeScore = maxP, maxD
	d.Cause = contract.CausePaired
	d.Reason = pairReason(best, wD, bestScore)

	s.Tracker.Register(in.RequestID, pp.pod.Key, dd.pod.Key)
	if s.Prefix != nil && pv.prompt.Blocks() > 0 {
		d.prefixHolder = pp.pod.Key // recorded once the selection lock is released
	}
	if tx != nil {
		s.charge(in, k, pp, dd, ledger, tx, defs)
	}
	return d, nil
}

// pairReason is a paired decision's reason:
//
//	roleset %q minimises prefill/maxPrefill + decode/maxDecode = %.4g
//	roleset %q minimises prefill/maxPrefill + %g·decode/maxDecode = %.4g (decode first)
//
// appended into a stack buffer: fmt boxed the roleset and the numbers, an allocation each, on
// every paired request, besides the string itself.
func pairReason(roleset string, wD, score float64) string {
	var buf [128]byte
	b := append(buf[:0], "roleset "...)
	b = strconv.AppendQuote(b, roleset)
	b = append(b, " minimises prefill/maxPrefill + "...)
	if wD != 1 {
		b = strconv.AppendFloat(b, wD, 'g', -1, 64)
		b = append(b, "·"...)
	}
	b = append(b, "decode/maxDecode = "...)
	b = strconv.AppendFloat(b, score, 'g', 4, 64)
	if wD != 1 {
		b = append(b, " (decode first)"...)
	}
	return string(b)
}

func inRoleset(pods []*podmodel.Pod, roleset string) []*podmodel.Pod {
	return appendInRoleset(nil, pods, roleset)
}

// appendInRoleset appends the pods of roleset to dst.
func appendInRoleset(dst, pods []*podmodel.Pod, roleset string) []*podmodel.Pod {
	for _, p := range pods {
		if p.Roleset == roleset {
			dst = append(dst, p)
		}
	}
	return dst
}

// cascadeScratch is the cascade's working storage. The cascade runs under the selector's lock,
// so the selector keeps one and every request reuses it: the candidate lists, the per-pod
// counts and decode candidates and the per-roleset scores were a dozen allocations per request.
// reset clears what points into a request (its pods, their metrics), so the scratch keeps no
// fleet alive between requests.
type cascadeScratch struct {
	prefill, decode  []*podmodel.Pod
	cached, affinity []*podmodel.Pod
	counts           []float64
	cands            []decodepolicy.Candidate
	names            []string
	// scorePrefill's and scoreDecode's
	prefillCounts    []float64
	keep             []bool
	results          []decodepolicy.Result
	pScores, dScores map[string]scored
	rates            map[string]float64
	rate             tokenload.DecodeRate // reads rates
	// remainingWork's
	remaining map[string]remainingCost
}

func (sc *cascadeScratch) reset() {
	clear(sc.prefill)
	clear(sc.decode)
	clear(sc.cached)
	clear(sc.affinity)
	clear(sc.cands)
	clear(sc.names)
	clear(sc.pScores)
	clear(sc.dScores)
	clear(sc.rates)
	clear(sc.remaining)
}

// resize returns *buf resized to n zeroed elements, growing it when it is too small.
func resize[T any](buf *[]T, n int) []T {
	if cap(*buf) < n {
		*buf = make([]T, n)
	} else {
		*buf = (*buf)[:n]
		clear(*buf)
	}
	return *buf
}

// scratchMap returns *m emptied, making it on first use.
func scratchMap[V any](m *map[string]V) map[string]V {
	if *m == nil {
		*m = map[string]V{}
	} else {
		clear(*m)
	}
	return *m
}

func candidatesFor(cands []decodepolicy.Candidate, pods []*podmodel.Pod) []decodepolicy.Candidate {
	keep := map[string]bool{}
	for _, p := range pods {
		keep[p.Key] = true
	}
	var out []decodepolicy.Candidate
	for _, c := range cands {
		if keep[c.Key] {
			out = append(out, c)
		}
	}
	return out
}
