// Package decodepolicy holds AIBrix's decode-side formulas: the per-pod inputs, the three
// ordered load-imbalance fast-path checks, the cold-start score and the load_balancing,
// least_request, conductor (TBT estimate) and token_load policies (lower is better), and
// Normalize, which turns lower-is-better scores into GIE's [0,1]. It is a library so that the
// aibrix-decode-scorer plugin, the aibrix-prefill-scorer plugin and aibrix-pd-pair share one
// copy of the math without importing one another.
package decodepolicy

import (
	"math"

	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
)

// Constants from AIBrix.
const (
	drainEpsilon         = 0.1  // minimum drain rate in the ratio check
	tbtFallbackMs        = 20.0 // conductor TBT when throughput is unknown
	gpuPressureThreshold = 0.9
	gpuPressurePenalty   = 1.5
	maxScoreFloor        = 0.01 // MaxScore starts here
)

// Candidate is one decode pod's inputs.
type Candidate struct {
	Key           string
	Pending       float64 // decode picks registered by pdgate and not yet running
	Running       float64 // live running requests from metrics
	HasRunning    bool
	Throughput    float64 // generation tokens/s
	HasThroughput bool
	FreePct       float64 // round(100 − KVUsage·100), ≤ 0 → 0.1
	Drain         float64 // running-requests drain rate over 1m
	HasDrain      bool
	LedgerTokens  float64 // token_load: ledger tokens + growth
}

// Count is running + pending (the request count every check and policy uses).
func (c Candidate) Count() float64 {
	if c.HasRunning {
		return c.Running + c.Pending
	}
	return c.Pending
}

// NewCandidate builds a candidate from engine metrics (nil = none) and the pending count.
func NewCandidate(key string, m *engineattr.Metrics, pending float64) Candidate {
	c := Candidate{Key: key, Pending: pending, FreePct: 100}
	if m == nil {
		return c
	}
	c.Running, c.HasRunning = m.Running, m.HasRunning
	c.Throughput, c.HasThroughput = m.GenThroughput, m.HasGenThroughput
	if m.HasKVUsage {
		c.FreePct = FreePercent(m.KVUsage)
	}
	c.Drain, c.HasDrain = m.DrainRate1m, m.HasDrainRate1m
	return c
}

// FreePercent is AIBrix's free GPU percent: round(100 − usage·100), ≤ 0 → 0.1.
func FreePercent(usage float64) float64 {
	f := math.Round(100 - usage*100)
	if f <= 0 || math.IsNaN(f) {
		return 0.1
	}
	return f
}

// Maxima are the normalisers of load_balancing: each at least 1.
type Maxima struct{ Count, Throughput, Free float64 }

// ComputeMaxima returns max(1, counts), max(1, observed throughput), max(1, free).
func ComputeMaxima(cands []Candidate) Maxima {
	m := Maxima{Count: 1, Throughput: 1, Free: 1}
	for _, c := range cands {
		m.Count = math.Max(m.Count, c.Count())
		if c.HasThroughput {
			m.Throughput = math.Max(m.Throughput, c.Throughput)
		}
		m.Free = math.Max(m.Free, c.FreePct)
	}
	return m
}

// Score returns the policy score of one candidate (lower is better). NaN means "cannot score".
func Score(policy string, c Candidate, mx Maxima, k pdknobs.Knobs) float64 {
	switch policy {
	case pdknobs.DecodeLeastRequest:
		return c.Count()
	case pdknobs.DecodeConductor:
		return ConductorTBT(c)
	case pdknobs.DecodeTokenLoad:
		return c.LedgerTokens
	default:
		return LoadBalancing(c, mx, k.DecodeLBWeightRunning, k.DecodeLBWeightThroughput)
	}
}

// LoadBalancing is (wRun·run/maxRun + wThru·(1 − thr/maxThr)) / (free/maxFree).
func LoadBalancing(c Candidate, mx Maxima, wRun, wThru float64) float64 {
	thr := 0.0
	if c.HasThroughput {
		thr = c.Throughput
	}
	return (wRun*c.Count()/mx.Count + wThru*(1-thr/mx.Throughput)) / (c.FreePct / mx.Free)
}

// ConductorTBT estimates time between tokens in ms.
func ConductorTBT(c Candidate) float64 {
	tbt := tbtFallbackMs
	if c.HasThroughput && c.Throughput > 0 {
		tbt = 1000 / c.Throughput
	}
	est := tbt * (1 + 1/math.Max(c.Count(), 1))
	if usage := 1 - c.FreePct/100; usage > gpuPressureThreshold {
		est *= gpuPressurePenalty
	}
	return est
}

// Result is one scored candidate.
type Result struct {
	Index        int
	Score        float64
	FallbackUsed bool // NaN under the policy, scored with load_balancing
	ColdStart    bool
}

// ScoreAll scores every candidate: the cold-start gate (except token_load), NaN → one retry
// with load_balancing, still NaN → skipped. MaxScore starts at 0.01 and is the max over scored
// pods (+Inf allowed).
func ScoreAll(policy string, cands []Candidate, k pdknobs.Knobs) (results []Result, maxScore float64) {
	return AppendScores(nil, policy, cands, k)
}

// AppendScores is ScoreAll appending the results to dst, for a caller that reuses a buffer.
func AppendScores(dst []Result, policy string, cands []Candidate, k pdknobs.Knobs) (results []Result, maxScore float64) {
	results = dst
	mx := ComputeMaxima(cands)
	anyRunning := false
	for _, c := range cands {
		anyRunning = anyRunning || c.HasRunning
	}
	maxScore = maxScoreFloor
	for i, c := range cands {
		r := Result{Index: i}
		switch {
		case policy != pdknobs.DecodeTokenLoad && anyRunning && !c.HasRunning:
			r.Score, r.ColdStart = 1.0+c.Pending, true
		default:
			r.Score = Score(policy, c, mx, k)
			if math.IsNaN(r.Score) {
				r.Score, r.FallbackUsed = LoadBalancing(c, mx, k.DecodeLBWeightRunning, k.DecodeLBWeightThroughput), true
			}
		}
		if math.IsNaN(r.Score) {
			continue
		}
		maxScore = math.Max(maxScore, r.Score)
		results = append(results, r)
	}
	return results, maxScore
}
