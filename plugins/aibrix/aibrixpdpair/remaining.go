package aibrixpdpair

import (
	"fmt"
	"math"
	"time"

	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// RemainingWork routes on the prefill work a request actually leaves (pdgate's extension; off
// when unset). Long multi-turn prompts share most of their prefix with the previous turn, and
// the pods that served that turn still hold it: the prefill pod that computed it and the decode
// pod that received its KV. For every candidate roleset the pair score's prefill side becomes
// the cheaper of:
//   - remote: the prefill work in flight on the prefill pod (the ledger's tokens) plus twice
//     the prompt tokens that pod does not hold (computeWeight);
//   - local: the prompt tokens the decode pod does not hold, when that is at most
//     LocalPrefillMaxTokens and no more than what it holds: the decode pod prefills them
//     itself, with no prefill leg, no wait behind the prefill queue and no second transfer of
//     the KV it already has. A prompt no decode pod holds is always disaggregated.
//
// Which pod holds what comes from the PrefixCacheMatchInfo the prefix producer puts on every
// candidate (the plugin declares it, so the EPP adds approx-prefix-cache-producer when nothing
// produces it): no second index, no second pass over the prompt. When the winning pair's local
// side is the cheaper, the request is served decode-only. The unit is
// tokens on both sides, so prefillScorePolicy must be token_load or hybrid_cache_load (the
// ledger's tokens); Validate refuses anything else.
type RemainingWork struct {
	// LocalPrefillMaxTokens bounds the uncached tokens a decode pod prefills itself, because
	// they run inside the decode steps of every sequence batched there. Default 2048: one
	// chunk of a chunked-prefill engine (vLLM's and SGLang's default chunk size), so a local
	// prefill delays the decode batch by at most one step.
	LocalPrefillMaxTokens int `json:"localPrefillMaxTokens"`
	// DecodeWeight is the decode side's weight in the pair score of a request some candidate
	// pod holds part of, in place of decodeFirst's. decodeFirst weighs decode up because
	// while the prefill queues are short a pair's prefill sides differ by little and TPOT
	// decides; under reuse they differ by the prompt tokens one pod must compute and another
	// need not, which is time in the request's own TTFT (20,000 tokens at 0.032 ms a token:
	// 640 ms), so the prefill side must be able to win. Default 0.5 (nil): measured on the
	// Mooncake trace (64 GPUs, P/D 1:1, load 0.5), decodeFirst's 5 sent half of the requests
	// that could reuse most of their prompt elsewhere (follow-up turns' p50 TTFT 780 ms, 9.9 %
	// prefix hits); 1 gave 287 ms and 19.5 %, 0.5 gave 167 ms and 23.1 % at a TPOT p99 of
	// 16.6 ms (15.2 before), 0.2 gave 87 ms and 25.1 % at 17.7 ms, 0 gave 25.4 ms TPOT p99.
	DecodeWeight *float64 `json:"decodeWeight,omitempty"`
	// PrefillBackedUp disaggregates only when it pays in time (nil: always, as before): while
	// the prefill pool is so backed up that the best prefill pod would miss the TTFT target, a
	// decode pod with slack prefills the prompt itself. See PrefillBackedUp.
	PrefillBackedUp *PrefillBackedUp `json:"prefillBackedUp,omitempty"`
}

// PrefillBackedUp is load-conditional disaggregation (pdgate's extension; Dynamo decides
// disaggregation on prefill and decode load the same way). Remote prefill is the right call
// while the prefill pool keeps up: a decode pod that prefills slows every sequence batched on
// it. Once every prefill pod's queue plus the prompt would take longer than the TTFT target,
// the request misses its SLO there anyway, and a decode pod with spare steps is the faster
// place. So a pair's local side is also allowed when:
//   - the prefill wait, (queue + uncached tokens) divided by PrefillTokensPerSecond, exceeds
//     TTFT: the least over the candidate pairs, or the pair's own with Scope "pair". The
//     threshold follows from the SLO and the engine's throughput, not from a token constant;
//   - the decode pod has slack: its ledger load is at most the candidates' mean;
//   - the tokens it would compute are at most MaxLocalTokens.
//
// Once any candidate pair's prefill pod misses the target, the pairs are scored as under reuse
// (prefill side in tokens, decode weighed DecodeWeight), not with decodeFirst's weight, whose
// premise, that a request's prefill waits little wherever it goes, no longer holds: a decode
// pod that pairs with only some prefill pods (rolesets, handoff classes: compat.go) would
// otherwise draw requests onto a prefill queue past the target because it is lightly loaded
// itself, which a router that picks the two sides independently never does. With one candidate
// pair (llm-d pods that all pair freely) this changes nothing. SkipMissedPairs goes further.
type PrefillBackedUp struct {
	// TTFT is the time-to-first-token target the prefill pool is held to, e.g. "1s". Required.
	TTFT string `json:"ttft"`
	// PrefillTokensPerSecond is one prefill pod's prompt throughput. Default 31250: Llama-3.1-8B
	// on one H100 at 0.032 ms a token (config/sim/llama3-8b-h100.yaml); take your engine's
	// figure (vLLM's benchmark_serving input throughput at batch, or the prefill leg time per
	// token in pdgate_sidecar metrics).
	PrefillTokensPerSecond float64 `json:"prefillTokensPerSecond"`
	// MaxLocalTokens bounds the prompt tokens a decode pod prefills under this rule, since each
	// chunk of them lengthens a decode step of every sequence batched there. Default 8192 (four
	// 2048-token chunks): in a sweep on the Mooncake trace (64 GPUs, load 0.8, a per-pair
	// trigger), 8192 with the slack test gave a TPOT p99 of 85 ms and goodput 0.600; 16384
	// without it 109 ms and 0.560.
	MaxLocalTokens int `json:"maxLocalTokens"`
	// TPOT, when set (e.g. "50ms"), is the time-per-output-token target a local prefill must
	// leave the decode pod within; the pod's slack is then measured against it instead of
	// against the candidates' mean load (see tpotSlack). Empty: the mean-load test.
	TPOT string `json:"tpot,omitempty"`
	// Scope is whose prefill wait decides that the pool is backed up: "fleet" (default), the
	// least wait over every candidate pair, so a decode pod prefills only when no prefill pod
	// anywhere meets the target; or "pair", the pair's own prefill pod, the best one its decode
	// pod can hand KV from. They differ only where a decode pod cannot pair with every prefill
	// pod: AIBrix rolesets, and handoff classes (compat.go). There "fleet" keeps a decode pod
	// from prefilling while another roleset's prefill pod has room, and the requests crowd onto
	// the rolesets whose prefill pods keep up; "pair" lets the decode pods of a backed-up
	// roleset take their own prompts. The handoff classes of one roleset are not other
	// rolesets under "fleet" (see allowsLocal): the decode pods of a backed-up class prefill
	// their own prompts under either scope, competing with the pairs that meet the target at
	// their own local queue (bench sim compat, rolling revision change: docs/benchmarks.md).
	Scope string `json:"scope,omitempty"`
	// SkipMissedPairs drops a pair whose prefill pod misses the target, and whose decode pod
	// may not prefill, from the candidates while another pair's prefill pod meets it: a remote
	// prefill there misses the TTFT target for certain. Off by default: it concentrates the
	// requests on the decode pods of the pairs that keep up, which cost the Mooncake trace on
	// 1 prefill : 2 decode pods its interactive goodput (TPOT target 11 ms), while on a fleet
	// split into handoff classes during a rollout it closed most of the gap to free pairing
	// (docs/benchmarks.md, "A pair past the TTFT target").
	SkipMissedPairs bool `json:"skipMissedPairs,omitempty"`
}

// Scopes of PrefillBackedUp.
const (
	BackedUpScopeFleet = "fleet"
	BackedUpScopePair  = "pair"
)

// Defaults of PrefillBackedUp.
const (
	DefaultPrefillTokensPerSecond = 31250
	DefaultBackedUpMaxLocalTokens = 8192
)

func (b *PrefillBackedUp) validate() error {
	d, err := time.ParseDuration(b.TTFT)
	switch {
	case err != nil || d <= 0:
		return fmt.Errorf("parameter remainingWork.prefillBackedUp.ttft=%q: must be a positive duration such as \"1s\"", b.TTFT)
	case b.PrefillTokensPerSecond < 0 || math.IsInf(b.PrefillTokensPerSecond, 0) || math.IsNaN(b.PrefillTokensPerSecond):
		return fmt.Errorf("parameter remainingWork.prefillBackedUp.prefillTokensPerSecond=%g: must be a finite number >= 0 (0 = %d)", b.PrefillTokensPerSecond, DefaultPrefillTokensPerSecond)
	case b.MaxLocalTokens < 0:
		return fmt.Errorf("parameter remainingWork.prefillBackedUp.maxLocalTokens=%d: must be >= 0 (0 = %d)", b.MaxLocalTokens, DefaultBackedUpMaxLocalTokens)
	}
	if b.TPOT != "" {
		if d, err := time.ParseDuration(b.TPOT); err != nil || d <= 0 {
			return fmt.Errorf("parameter remainingWork.prefillBackedUp.tpot=%q: must be a positive duration such as \"50ms\", or unset", b.TPOT)
		}
	}
	switch b.Scope {
	case "", BackedUpScopeFleet, BackedUpScopePair:
	default:
		return fmt.Errorf("parameter remainingWork.prefillBackedUp.scope=%q: must be %q (default) or %q", b.Scope, BackedUpScopeFleet, BackedUpScopePair)
	}
	return nil
}

// tpotSlack reports whether the decode pod stays within the TPOT target if it prefills
// tokens itself, and whether it could tell (false: no TPOT target, or the pod reports no
// running count, generation throughput or drain rate; the mean-load test decides then).
//
// From the pod's own metrics: its TPOT now is s = running ÷ generated tokens per second. A
// sequence on it has, by Little's law, running ÷ finished-per-second seconds left to run. The
// local prefill stalls every one of them for tokens ÷ prefill rate seconds, stretching that
// remaining time, and so the TPOT, by the same fraction:
//
//	s · (1 + stall · drain ÷ running) ≤ target
//
// A pod running nothing has no sequence to slow.
func (b *PrefillBackedUp) tpotSlack(m *engineattr.Metrics, tokens, rate float64) (slack, known bool) {
	if b.TPOT == "" || m == nil || !m.HasRunning {
		return false, false
	}
	target, _ := time.ParseDuration(b.TPOT)
	if m.Running <= 0 {
		return true, true
	}
	if !m.HasGenThroughput || m.GenThroughput <= 0 || !m.HasDrainRate1m {
		return false, false
	}
	s := m.Running / m.GenThroughput
	stretch := 1 + (tokens/rate)*m.DrainRate1m/m.Running
	return s*stretch <= target.Seconds(), true
}

// budget returns the TTFT target in prefill tokens and the local bound (Validate has run).
func (b *PrefillBackedUp) budget() (ttftTokens, maxLocal float64) {
	d, _ := time.ParseDuration(b.TTFT)
	rate, maxLocal := b.rate()
	return d.Seconds() * rate, maxLocal
}

// rate is the prefill throughput and the local bound, defaults applied.
func (b *PrefillBackedUp) rate() (tokensPerSecond, maxLocal float64) {
	tokensPerSecond, maxLocal = b.PrefillTokensPerSecond, float64(b.MaxLocalTokens)
	if tokensPerSecond == 0 {
		tokensPerSecond = DefaultPrefillTokensPerSecond
	}
	if maxLocal == 0 {
		maxLocal = DefaultBackedUpMaxLocalTokens
	}
	return tokensPerSecond, maxLocal
}

// DefaultLocalPrefillMaxTokens is RemainingWork.LocalPrefillMaxTokens's default.
const DefaultLocalPrefillMaxTokens = 2048

// DefaultRemainingWorkDecodeWeight is RemainingWork.DecodeWeight's default.
const DefaultRemainingWorkDecodeWeight = 0.5

func (r *RemainingWork) decodeWeight() float64 {
	if r.DecodeWeight != nil {
		return *r.DecodeWeight
	}
	return DefaultRemainingWorkDecodeWeight
}

func (r *RemainingWork) localMax() float64 {
	if r.LocalPrefillMaxTokens > 0 {
		return float64(r.LocalPrefillMaxTokens)
	}
	return DefaultLocalPrefillMaxTokens
}

// computeWeight counts each token a pod must compute twice: once in the request's own time to
// first token (it waits for the queue W, then computes u: W + u), and once in the wait of every
// request queued behind it on that pod (u more for each of them, at least one). Queued work
// already in W was paid for when it was admitted. Measured on the Mooncake trace (P/D 1:1, load
// 0.5, seed 1, with the text index of 120af02): weight 1 gave follow-up turns a p50 TTFT of 781 ms and 8.5 % prefix hits, 2 gave
// 748 ms and 9.8 %, 4 gave 679 ms and 10.0 % at a higher TPOT p99 (20.2 ms against 18.8).
const computeWeight = 2

// remainingCost is one roleset's prefill-side cost under RemainingWork.
type remainingCost struct {
	cost     float64 // tokens: min(remote, local when allowed), less the least uncached work
	local    bool    // the decode pod prefills itself
	backedUp bool    // local because the prefill pool misses the TTFT target (PrefillBackedUp)
	// classLocal: backedUp while some pair meets the target (one of another handoff class of
	// the same roleset, or any under scope "pair"); queued is then the decode pod's local
	// prefill in flight, counted in its cost as a prefill pod's queue is
	classLocal bool
	queued     float64
	missed     bool    // remote only, and its prefill pod misses the TTFT target (PrefillBackedUp)
	remote     float64 // in-flight work + uncached tokens on the prefill pod
	ud         float64 // uncached tokens on the decode pod
}

// remainingWork returns, per roleset scored on both sides, its cost and the largest cost (≥ 1);
// nil when no candidate pod holds any of the prompt, no local prefill is allowed and no pair's
// prefill pod misses PrefillBackedUp's target, so traffic without reuse, on a prefill pool that
// keeps up, is scored exactly as without RemainingWork. With SkipMissedPairs, a pair that
// misses the target without a local side costs +Inf while another pair meets it.
// Costs are relative to the least uncached work any pair leaves, so that the prompt's length,
// which every pair must compute unless a cache holds it, does not dilute the ledger's load
// differences in the pair score.
func (s *Selector) remainingWork(in Input, names []string, pScores, dScores map[string]scored) (map[string]remainingCost, float64) {
	prompt := float64(in.PromptTokens)
	uncached := func(p *podmodel.Pod) float64 { return prompt * (1 - heldFraction(p)) }
	out := scratchMap(&s.scratch.remaining)
	bu := prefillBackedUp(in.RemainingWork.PrefillBackedUp, names, pScores, dScores, uncached)
	reuse, minU := false, math.Inf(1)
	for _, name := range names {
		pp, dd := pScores[name], dScores[name]
		up, ud := uncached(pp.pod), uncached(dd.pod)
		reuse = reuse || up < prompt || ud < prompt
		rc := remainingCost{remote: pp.score + computeWeight*up, ud: ud}
		// Local where the decode pod's cache is what makes it pay: it holds at least as much
		// of the prompt as is left to compute, and what is left fits in one chunk. Otherwise
		// only when the prefill pool is backed up past the TTFT target and this decode pod
		// has slack.
		rc.local = ud <= in.RemainingWork.localMax() && prompt-ud >= ud && computeWeight*ud < rc.remote
		misses := bu.misses(pp, up)
		if !rc.local && bu.allowsLocal(name, misses) && ud <= bu.maxLocal && in.RemainingWork.PrefillBackedUp.hasSlack(dd, bu.meanD, ud) {
			// While some pair meets the target, the decode pod competes with it as a prefill
			// pod would: its own local prefills in flight queue ahead of this one (measured on
			// bench sim compat's rollout, a decode pod offered at no queue took several 4,000-
			// token prompts within one scrape and answered them 1.1-2.9 s late).
			rc.local, rc.backedUp, reuse = true, true, true
			if rc.classLocal = bu.someMeet; rc.classLocal {
				rc.queued = s.Tracker.LocalTokens(dd.pod.Key)
			}
		}
		if misses && !rc.local {
			// This pair would miss the TTFT target and its decode pod may not prefill: the
			// prefill queues, not decodeFirst's decode weighting, decide, and with
			// SkipMissedPairs it leaves the candidates while another pair meets the target.
			rc.missed, reuse = true, true
		}
		minU = math.Min(minU, up)
		if rc.local {
			minU = math.Min(minU, ud)
		}
		out[name] = rc
	}
	if !reuse {
		return nil, 0
	}
	maxCost := 1.0
	for name, rc := range out {
		if rc.missed && bu.someMeet && bu.b.SkipMissedPairs {
			rc.cost = math.Inf(1) // never the pick while a pair that meets the target is left
			out[name] = rc
			continue
		}
		if rc.local {
			rc.cost = rc.queued + computeWeight*(rc.ud-minU)
		} else {
			rc.cost = rc.remote - computeWeight*minU
		}
		maxCost = math.Max(maxCost, rc.cost)
		out[name] = rc
	}
	return out, maxCost
}

// backedUpTest is PrefillBackedUp's view of one selection's candidate pairs.
type backedUpTest struct {
	b *PrefillBackedUp // nil: the rule is off, no pair ever misses
	// budget is the TTFT target in prefill tokens; maxLocal the local bound; meanD the
	// candidates' mean decode load (the slack test without TPOT metrics).
	budget, maxLocal, meanD float64
	// someMeet: some candidate pair's prefill pod meets the target (the fleet keeps up).
	someMeet bool
	// meetRoleset is the first roleset (handoff class stripped) with a pair that meets the
	// target; meetTwo says a second roleset has one too.
	meetRoleset string
	meetTwo     bool
}

// prefillBackedUp prepares the test of whether a pair's prefill side misses b's TTFT budget:
// its prefill wait, queue plus the prompt tokens that pod does not hold, over the budget.
func prefillBackedUp(b *PrefillBackedUp, names []string, pScores, dScores map[string]scored, uncached func(*podmodel.Pod) float64) backedUpTest {
	if b == nil || len(names) == 0 {
		return backedUpTest{}
	}
	t := backedUpTest{b: b}
	t.budget, t.maxLocal = b.budget()
	for _, name := range names {
		pp := pScores[name]
		if !t.misses(pp, uncached(pp.pod)) {
			switch r := rolesetOf(name); {
			case !t.someMeet:
				t.someMeet, t.meetRoleset = true, r
			case r != t.meetRoleset:
				t.meetTwo = true
			}
		}
		t.meanD += dScores[name].score / float64(len(names))
	}
	return t
}

// misses reports whether a pair's prefill pod, at score pp and with up prompt tokens to
// compute, would miss the TTFT target.
func (t backedUpTest) misses(pp scored, up float64) bool {
	return t.b != nil && pp.score+up > t.budget
}

// allowsLocal reports whether the scope lets pair name, whose prefill pod misses the target
// (misses), prefill on its decode pod: "pair", exactly then; "fleet", only once no pair of
// another roleset meets it. The handoff classes of one roleset (compat.go) do not count as
// others: their prefill pods cannot serve this decode pod, and unlike rolesets, which the
// operator sizes, the split is whatever is deployed (during a rollout, a class of 2 prefill
// and 1 decode pods beside one of 1 and 2), so a class short of prefill pods has only its
// decode pods' spare steps. Without classes this is "no candidate pair meets it".
func (t backedUpTest) allowsLocal(name string, misses bool) bool {
	if t.b == nil || !misses {
		return false
	}
	if t.b.Scope == BackedUpScopePair || !t.someMeet {
		return true
	}
	return !t.meetTwo && t.meetRoleset == rolesetOf(name)
}

// hasSlack is the decode side's test for a backed-up local prefill of tokens: the TPOT test
// where the target is set and the pod's metrics tell, else a load at most the candidates'
// mean.
func (b *PrefillBackedUp) hasSlack(dd scored, meanD, tokens float64) bool {
	rate, _ := b.rate()
	if slack, known := b.tpotSlack(metricsOf(dd.pod), tokens, rate); known {
		return slack
	}
	return dd.score <= meanD
}

// heldFraction is the share of the prompt's blocks a pod holds, from the PrefixCacheMatchInfo
// the prefix producer puts on every candidate before scheduling (approx-prefix-cache-producer,
// which records both the prefill and the decode pick of a P/D request and matches the whole
// prompt, or the precise producer's engine-reported blocks). 0 when there is none.
func heldFraction(p *podmodel.Pod) float64 {
	if p == nil || p.Endpoint == nil {
		return 0
	}
	v, ok := p.Endpoint.Get(attrprefix.PrefixCacheMatchInfoKey)
	if !ok {
		return 0
	}
	mi, ok := v.(*attrprefix.PrefixCacheMatchInfo)
	if !ok || mi == nil || mi.TotalBlocks() <= 0 {
		return 0
	}
	return math.Min(1, float64(mi.MatchBlocks())/float64(mi.TotalBlocks()))
}

func (rc remainingCost) String() string {
	if rc.classLocal {
		return fmt.Sprintf("local %.0f tokens behind %.0f queued on the decode pod: its prefill pods miss the TTFT target, remote %.0f", rc.ud, rc.queued, rc.remote)
	}
	if rc.backedUp {
		return fmt.Sprintf("local %.0f tokens: every prefill queue misses the TTFT target, remote %.0f", rc.ud, rc.remote)
	}
	if rc.local {
		return fmt.Sprintf("local %.0f tokens uncached on decode < remote %.0f", rc.ud, rc.remote)
	}
	if rc.missed {
		return fmt.Sprintf("remote %.0f misses the TTFT target and the decode pod may not prefill %.0f", rc.remote, rc.ud)
	}
	return fmt.Sprintf("remote %.0f (decode would prefill %.0f)", rc.remote, rc.ud)
}

// Consumes implements fwkplugin.ConsumerPlugin: with remainingWork the pair reads each
// candidate's PrefixCacheMatchInfo, so the EPP adds the default prefix producer when nothing
// else produces it, and orders it first.
func (p *Plugin) Consumes() map[string]any {
	if p.params.RemainingWork == nil {
		return map[string]any{}
	}
	return map[string]any{attrprefix.PrefixCacheMatchInfoKey: attrprefix.PrefixCacheMatchInfo{}}
}
