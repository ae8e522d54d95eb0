package aibrixpdpair

import (
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/pdgate/pdgate/plugins/aibrix/internal/decodepolicy"
	"github.com/pdgate/pdgate/plugins/aibrix/internal/prefillpolicy"
	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

type scored struct {
	pod      *podmodel.Pod // points into Input.Pods
	score    float64
	matchPct float64
}

// scorePrefill applies the std-dev skip and the prefill policy, keeping the minimum score per
// roleset; maxP = max(1, all scores).
func (s *Selector) scorePrefill(in Input, prefill []*podmodel.Pod, pv prefixView, tx tokenload.Tx,
	defs tokenload.Defaults, d *Decision) (map[string]scored, float64) {
	k := in.Knobs
	sc := &s.scratch
	counts := resize(&sc.prefillCounts, len(prefill))
	maxCount := 1.0
	for i, p := range prefill {
		counts[i] = s.Tracker.PrefillCount(p.Key)
		maxCount = math.Max(maxCount, counts[i])
	}
	keep := prefillpolicy.AppendStdDevSkip(sc.keep[:0], counts, float64(k.PrefixCacheStandardDeviationFactor))
	sc.keep = keep
	match := pv.match
	kvWeight := k.TokenLoadKVWeight
	if kvWeight == 0 {
		kvWeight = defs.KVWeight
	}
	total := 0
	if k.PrefillScorePolicy == pdknobs.PrefillConductor {
		// Only conductor reads the prompt's length, and counting the characters of a long
		// prompt is a pass over all of it inside the ledger's critical section.
		total = in.promptChars()
	}
	// Reading a pod's engine metrics copies them (the attribute contract), so only for a
	// policy that scores them.
	readMetrics := prefillpolicy.ReadsMetrics(k.PrefillScorePolicy)
	out := scratchMap(&sc.pScores)
	maxP := 1.0
	for i, p := range prefill {
		if !keep[i] {
			if in.Explain {
				d.Notes = append(d.Notes, fmt.Sprintf("prefill %s skipped: count %g above mean+%d·stddev", p.Key, counts[i], k.PrefixCacheStandardDeviationFactor))
			}
			continue
		}
		c := prefillpolicy.Candidate{Key: p.Key, Count: counts[i], MatchPct: match[p.Key]}
		if readMetrics {
			c.Metrics = metricsOf(p)
		}
		if tx != nil {
			c.LedgerScore = tx.Prefill(tokenload.PodKey(p.Key)).Priority(kvWeight)
		}
		sc := prefillpolicy.Score(k.PrefillScorePolicy, c, maxCount, total, k)
		if math.IsNaN(sc) {
			continue
		}
		maxP = math.Max(maxP, sc)
		if cur, ok := out[p.Roleset]; !ok || sc < cur.score {
			out[p.Roleset] = scored{pod: p, score: sc, matchPct: prefillpolicy.EffectiveMatch(c.MatchPct, k.MinMatchPct)}
		}
	}
	return out, maxP
}

// scoreDecode scores decode candidates with the decode policy (cold start, NaN fallback) and
// keeps the minimum per roleset; maxD starts at 0.01.
func (s *Selector) scoreDecode(k pdknobs.Knobs, decode []*podmodel.Pod, cands []decodepolicy.Candidate,
	tx tokenload.Tx) (map[string]scored, float64, error) {
	sc := &s.scratch
	if k.DecodeScorePolicy == pdknobs.DecodeTokenLoad && tx != nil {
		rates := scratchMap(&sc.rates)
		for _, c := range cands {
			if c.HasThroughput && c.Throughput > 0 && c.Count() > 0 {
				rates[c.Key] = c.Throughput / c.Count()
			}
		}
		if sc.rate == nil { // bound to the scratch once: a closure per request escaped to the ledger
			sc.rate = func(pod tokenload.PodKey) (float64, bool) { r, ok := sc.rates[string(pod)]; return r, ok }
		}
		for i := range cands {
			cands[i].LedgerTokens = tx.Decode(tokenload.PodKey(cands[i].Key), sc.rate)
		}
	}
	results, maxD := decodepolicy.AppendScores(sc.results[:0], k.DecodeScorePolicy, cands, k)
	sc.results = results
	if len(results) == 0 {
		return nil, 0, fail(http.StatusServiceUnavailable, contract.CauseNoPair, "no decode pod could be scored")
	}
	out := scratchMap(&sc.dScores)
	for _, r := range results {
		p := decode[r.Index]
		if cur, ok := out[p.Roleset]; !ok || r.Score < cur.score {
			out[p.Roleset] = scored{pod: p, score: r.Score}
		}
	}
	return out, maxD, nil
}

// charge records the pick's token-load charges (inside the same Atomically as the reads); a
// zero pp (a decode-only pick) charges the decode side alone.
func (s *Selector) charge(in Input, k pdknobs.Knobs, pp, dd scored, ledger tokenload.Ledger, tx tokenload.Tx, defs tokenload.Defaults) {
	ttl := defs.TTL
	if k.TokenLoadTTLSeconds != nil {
		ttl = time.Duration(*k.TokenLoadTTLSeconds) * time.Second
	}
	if pp.pod != nil && (k.PrefillScorePolicy == pdknobs.PrefillTokenLoad || k.PrefillScorePolicy == pdknobs.PrefillHybridCacheLoad) {
		cost := k.TokenLoadRequestCost
		if cost == 0 {
			cost = defs.RequestCost
		}
		session := in.SessionKey
		if k.TokenLoadSessionTTLSeconds != nil && *k.TokenLoadSessionTTLSeconds == 0 {
			session = "" // the session-delta rule is off for this request
		}
		match := -1
		switch {
		case in.RemainingWork != nil:
			match = int(100 * heldFraction(pp.pod)) // the tokens the prefill pod will compute
		case k.PrefillScorePolicy == pdknobs.PrefillHybridCacheLoad:
			match = int(pp.matchPct)
		}
		newTokens := ledger.NewTokens(in.Model, session, in.BodyTokens, match)
		tx.ChargePrefill(tokenload.PrefillCharge{RequestID: in.RequestID, Pod: tokenload.PodKey(pp.pod.Key),
			Tokens: cost + float64(newTokens), TTL: ttl})
	}
	if k.DecodeScorePolicy == pdknobs.DecodeTokenLoad {
		tx.ChargeDecode(tokenload.DecodeCharge{RequestID: in.RequestID, Pod: tokenload.PodKey(dd.pod.Key),
			Tokens: float64(in.BodyTokens), TTL: ttl})
	}
}

// Combined-overflow thresholds (AIBrix constants).
const (
	combinedLowThreshold  = 0.25
	combinedHighThreshold = 1.0
)

// QueueScore is AIBrix's request-rate score: (waiting + prefill prealloc + decode prealloc) /
// drain rate; NaN when the pod has no drain rate.
func QueueScore(p *podmodel.Pod) float64 {
	m := metricsOf(p)
	if m == nil || !m.HasDrainRate1m {
		return math.NaN()
	}
	w := 0.0
	if m.HasWaiting {
		w = m.Waiting
	}
	return (w + m.PrefillPrealloc + m.DecodePrealloc) / m.DrainRate1m
}

// shouldPickCombined: when some combined pod scores < 0.25 and some bucket prefill pod (or,
// failing that, decode pod) scores > 1.0, the least-scored combined pod (strict <, shuffled,
// NaN never wins) takes the request. It returns the pick or, when it did not fire, why.
func (s *Selector) shouldPickCombined(combined, prefill, decode []*podmodel.Pod) (*podmodel.Pod, string) {
	combinedLow := false
	for _, p := range combined {
		if QueueScore(p) < combinedLowThreshold {
			combinedLow = true
			break
		}
	}
	if !combinedLow {
		return nil, ""
	}
	hot := ""
	for _, p := range prefill {
		if sc := QueueScore(p); sc > combinedHighThreshold {
			hot = fmt.Sprintf("prefill %s queue score %.3g > %g", p.Key, sc, combinedHighThreshold)
			break
		}
	}
	if hot == "" {
		for _, p := range decode {
			if sc := QueueScore(p); sc > combinedHighThreshold {
				hot = fmt.Sprintf("decode %s queue score %.3g > %g", p.Key, sc, combinedHighThreshold)
				break
			}
		}
	}
	if hot == "" {
		return nil, ""
	}
	var best *podmodel.Pod
	bestScore := math.Inf(1)
	for _, p := range s.shufflePods(combined) {
		sc := QueueScore(p)
		if sc < bestScore {
			best, bestScore = p, sc
		}
	}
	if best == nil {
		return nil, "PD is hot (" + hot + ") but no combined pod has a score"
	}
	return best, fmt.Sprintf("PD is hot (%s) and combined %s is idle (queue score %.3g < %g)", hot, best.Key, bestScore, combinedLowThreshold)
}
