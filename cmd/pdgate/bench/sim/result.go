package simbench

import (
	"math"
	"slices"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Result is one run's outcome.
type Result struct {
	sent, ended int
	failed      map[string]int
	answers     map[string]int // requests the EPP answered itself, by HTTP status (0: ext_proc stream error)
	ttft, tpot  []float64      // ms, served requests
	// kinds[i] is the workload kind of served request i and ids[i] its arrival number (the
	// same request in every run of one source and seed); sentByKind counts arrivals per kind
	kinds      []string
	ids        []int
	sentByKind map[string]int
	// TTFT of served first and follow-up turns (arrivals with a Turn), ms
	ttftFirst, ttftFollow []float64
	e2e                   []float64
	perPod                []podLoad
	legs                  legStats
	transfers             [5]int // KV transfers by shared topology level (with a Placement)
	// prompt tokens prefilled and those of them served from the prefilling pod's prefix cache
	promptTokens, cachedTokens int64
	missedReuseTokens          int64
	cpuLoadedTokens            int64
	// prefillFallbacks counts prefill legs past Config.PrefillTimeout, prefilled locally
	prefillFallbacks int

	Summary Summary
}

type podLoad struct {
	name, role             string
	primary, prefill, done int
}

// legStats sums engine-side leg times: arrival at the engine to the first token (what the
// simulator's time_to_first_token histogram measures), per leg kind.
type legStats struct {
	sum [3]time.Duration
	n   [3]int
}

func (l *legStats) add(k legKind, d time.Duration) { l.sum[k] += d; l.n[k]++ }

// LegMeans are mean engine-side times to the first token, in ms (NaN when no such leg ran).
type LegMeans struct {
	Local, Prefill, Decode float64
}

func (l *legStats) means() LegMeans {
	m := func(k legKind) float64 {
		if l.n[k] == 0 {
			return math.NaN()
		}
		return ms(l.sum[k]) / float64(l.n[k])
	}
	return LegMeans{Local: m(legLocal), Prefill: m(legPrefill), Decode: m(legDecode)}
}

// Dist is a latency distribution in milliseconds.
type Dist struct {
	P50, P90, P99, Mean float64
}

// Summary is what the report prints for one run.
type Summary struct {
	Requests, Served int
	Failed           map[string]int
	// EPPAnswers counts the requests the EPP answered itself instead of routing them, by HTTP
	// status (503: no capacity or no pair, 429: shed, …; 0: an error GIE cannot map, which ends
	// the ext_proc stream); they are among Failed too, by status and cause.
	EPPAnswers      map[string]int
	TTFT, TPOT, E2E Dist
	// Goodput is the share of sent requests meeting both SLOs.
	Goodput float64
	// Spread is max/min requests per pod among the pods serving the request's primary (decode
	// or combined) leg, and among prefill pods; CV is the coefficient of variation.
	DecodeSpread, DecodeCV   float64
	PrefillSpread, PrefillCV float64
	// EPPCPUMicrosPerRequest is the EPP's thread CPU (PrepareData, admission, Schedule,
	// PreRequest, response hooks) per request.
	EPPCPUMicrosPerRequest float64
	// EngineTTFT is the mean engine-side time to first token per leg kind.
	EngineTTFT            LegMeans
	VirtualSeconds        float64
	WallSeconds           float64
	RequestsPerWallSecond float64
	// PrefixHitRate is the share of prompt tokens the prefilling pod found in its prefix cache
	// (every request's prefill leg, or its local prefill).
	PrefixHitRate float64
	// Transfers counts KV transfers by the tightest level the two pods shared (host, rack,
	// zone, region, none), with a placement; nil without.
	Transfers map[string]int `json:",omitempty"`
	// FirstTurnTTFT and FollowUpTTFT split TTFT by conversation turn (served requests of
	// traces that mark turns: Mooncake's follow-ups continue a conversation seen earlier in
	// the trace); nil for workloads without turns.
	FirstTurnTTFT *Dist `json:",omitempty"`
	FollowUpTTFT  *Dist `json:",omitempty"`
	// PromptTokens is the prompt tokens of every prefill (prefill legs and local prefills);
	// ComputedPrefillTokens is the fleet's prefill work: those tokens minus prefix-cache hits.
	PromptTokens, ComputedPrefillTokens int64
	// MissedReuseTokens is the prompt tokens a prefill computed although another pod held them
	// in its prefix cache at that instant: the prefill work routing left on the table, as
	// opposed to reuse no pod could offer any more (evicted, or never seen).
	MissedReuseTokens int64 `json:",omitempty"`
	// CPULoadedTokens is the prefix-cache hits the engines loaded from their CPU offload tier
	// (profile cpuOffload) rather than found on the GPU.
	CPULoadedTokens int64 `json:",omitempty"`
	// PrefillFallbacks is the prefill legs cancelled at Config.PrefillTimeout whose decode pod
	// then prefilled the prompt itself (the sidecar's fallback-local).
	PrefillFallbacks int `json:",omitempty"`
}

// prefix records one prefill: prompt tokens, how many were prefix-cache hits and how many of
// those the engine loaded from its CPU tier.
func (r *Result) prefix(prompt, cached, loaded, fleetBest int) {
	r.promptTokens += int64(prompt)
	r.cachedTokens += int64(cached)
	r.cpuLoadedTokens += int64(loaded)
	r.missedReuseTokens += int64(max(fleetBest-cached, 0))
}

func newResult(pods int) *Result {
	return &Result{failed: map[string]int{}, answers: map[string]int{}, perPod: make([]podLoad, pods), sentByKind: map[string]int{}}
}

func (r *Result) record(q *request, ttft, tpot, e2e time.Duration) {
	r.ttft = append(r.ttft, ms(ttft))
	r.kinds = append(r.kinds, q.a.Kind)
	r.ids = append(r.ids, q.id)
	switch q.a.Turn {
	case TurnFirst:
		r.ttftFirst = append(r.ttftFirst, ms(ttft))
	case TurnFollowUp:
		r.ttftFollow = append(r.ttftFollow, ms(ttft))
	}
	r.e2e = append(r.e2e, ms(e2e))
	if q.a.Output > 1 {
		r.tpot = append(r.tpot, ms(tpot))
	} else {
		r.tpot = append(r.tpot, math.NaN())
	}
	q.decode.doneCount()
}

func (p *pod) doneCount() { p.sim.res.perPod[p.idx].done++ }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// SLO is the goodput target: a request is good when both hold.
type SLO struct {
	TTFT, TPOT time.Duration
}

func (r *Result) finish(s *Sim, wall time.Duration) {
	for i, p := range s.pods {
		r.perPod[i] = podLoad{name: p.spec.Name, role: p.spec.Role, primary: p.primary, prefill: p.prefillLegs, done: r.perPod[i].done}
	}
	sum := Summary{Requests: r.sent, Served: len(r.ttft), Failed: r.failed, EPPAnswers: r.answers,
		VirtualSeconds: s.now().Sub(s.start).Seconds(), WallSeconds: wall.Seconds()}
	if r.promptTokens > 0 {
		sum.PrefixHitRate = float64(r.cachedTokens) / float64(r.promptTokens)
	}
	sum.PromptTokens, sum.ComputedPrefillTokens = r.promptTokens, r.promptTokens-r.cachedTokens
	sum.MissedReuseTokens = r.missedReuseTokens
	sum.CPULoadedTokens = r.cpuLoadedTokens
	sum.PrefillFallbacks = r.prefillFallbacks
	if len(r.ttftFirst)+len(r.ttftFollow) > 0 {
		first, follow := dist(r.ttftFirst), dist(r.ttftFollow)
		sum.FirstTurnTTFT, sum.FollowUpTTFT = &first, &follow
	}
	if r.sent > 0 {
		var cpu time.Duration
		for _, e := range s.epps {
			cpu += e.cpu
		}
		sum.EPPCPUMicrosPerRequest = float64(cpu) / float64(time.Microsecond) / float64(r.sent)
	}
	if wall > 0 {
		sum.RequestsPerWallSecond = float64(r.sent) / wall.Seconds()
	}
	sum.TTFT, sum.E2E = dist(r.ttft), dist(r.e2e)
	sum.TPOT = dist(r.tpot)
	sum.EngineTTFT = r.legs.means()
	var dec, pre []float64
	for _, p := range r.perPod {
		switch p.role {
		case RolePrefill:
			pre = append(pre, float64(p.prefill))
		default:
			dec = append(dec, float64(p.primary))
		}
	}
	if s.cfg.Placement != nil {
		sum.Transfers = map[string]int{}
		for lvl, n := range r.transfers {
			sum.Transfers[podmodel.Level(lvl).String()] = n
		}
	}
	sum.DecodeSpread, sum.DecodeCV = spread(dec)
	sum.PrefillSpread, sum.PrefillCV = spread(pre)
	r.Summary = sum
}

// Goodput is the share of sent requests that were served within both SLOs.
func (r *Result) Goodput(slo SLO) float64 {
	if r.sent == 0 {
		return 0
	}
	good := 0
	for i := range r.ttft {
		if r.good(i, slo) {
			good++
		}
	}
	return float64(good) / float64(r.sent)
}

func (r *Result) good(i int, slo SLO) bool {
	okTPOT := math.IsNaN(r.tpot[i]) || r.tpot[i] <= ms(slo.TPOT)
	return r.ttft[i] <= ms(slo.TTFT) && okTPOT
}

// GoodputByKind is Goodput per workload kind (Arrival.Kind).
func (r *Result) GoodputByKind(slo SLO) map[string]float64 {
	good := map[string]int{}
	for i, k := range r.kinds {
		if r.good(i, slo) {
			good[k]++
		}
	}
	out := map[string]float64{}
	for k, n := range r.sentByKind {
		out[k] = float64(good[k]) / float64(n)
	}
	return out
}

func dist(v []float64) Dist {
	s := make([]float64, 0, len(v))
	var sum float64
	for _, x := range v {
		if !math.IsNaN(x) {
			s = append(s, x)
			sum += x
		}
	}
	if len(s) == 0 {
		return Dist{P50: math.NaN(), P90: math.NaN(), P99: math.NaN(), Mean: math.NaN()}
	}
	slices.Sort(s)
	return Dist{P50: report.Percentile(s, 50), P90: report.Percentile(s, 90), P99: report.Percentile(s, 99), Mean: sum / float64(len(s))}
}

// spread returns max/min (+Inf when a pod got nothing) and the coefficient of variation.
func spread(v []float64) (float64, float64) {
	if len(v) == 0 {
		return math.NaN(), math.NaN()
	}
	lo, hi, sum := math.Inf(1), 0.0, 0.0
	for _, x := range v {
		lo, hi, sum = min(lo, x), max(hi, x), sum+x
	}
	mean := sum / float64(len(v))
	var ss float64
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	cv := math.NaN()
	if mean > 0 {
		cv = math.Sqrt(ss/float64(len(v))) / mean
	}
	if lo == 0 {
		return math.Inf(1), cv
	}
	return hi / lo, cv
}
