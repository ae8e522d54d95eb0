// Package prefillpolicy holds AIBrix's prefill-side formulas: the prefill load-imbalance fast
// path, the standard-deviation skip, the prefix_cache, least_request, conductor (TTFT
// estimate), token_load and hybrid_cache_load policies (lower is better) and AIBrix's prefix
// hash table. It is a library so that the aibrix-prefill-scorer plugin and aibrix-pd-pair
// share one copy without importing one another.
package prefillpolicy

import (
	"fmt"
	"math"
	"slices"

	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
)

// Conductor constants (AIBrix NewConductorPrefillPolicyConfig).
const (
	prefixA  = 0.005
	prefixB  = 1.0
	prefillA = 0.001
	prefillB = 1.5
	prefillC = 5.0
	// fallbackPrefillTokens: missing prefill-time metric → the cost of a 512-token prefill.
	fallbackPrefillTokens = 512
)

// Candidate is one prefill pod's inputs.
type Candidate struct {
	Key      string
	Count    float64 // in-flight prefill requests registered by pdgate
	MatchPct float64 // prefix match percent (0..100)
	Metrics  *engineattr.Metrics
	// LedgerScore is active + kvWeight·kv from the token ledger (token_load, hybrid).
	LedgerScore float64
}

// EffectiveMatch clamps a match below minMatchPct to 0 and caps it at 100.
func EffectiveMatch(m, minMatchPct float64) float64 {
	if m < minMatchPct || m < 0 || math.IsNaN(m) {
		return 0
	}
	return math.Min(m, 100)
}

// Score returns the policy score (lower is better) for a candidate; maxCount = max(1, counts).
// totalTokens is the prompt length in prefix-tokenizer tokens (conductor).
func Score(policy string, c Candidate, maxCount float64, totalTokens int, k pdknobs.Knobs) float64 {
	// ReadsMetrics names the policies below that read c.Metrics.
	m := EffectiveMatch(c.MatchPct, k.MinMatchPct)
	switch policy {
	case pdknobs.PrefillLeastRequest:
		return c.Count
	case pdknobs.PrefillConductor:
		return ConductorTTFT(c.Count, m, totalTokens, c.Metrics)
	case pdknobs.PrefillTokenLoad:
		return c.LedgerScore
	case pdknobs.PrefillHybridCacheLoad:
		return Hybrid(c.LedgerScore, m, k.HybridCacheLoadFactor)
	default:
		return (100-m)*0.1 + c.Count/maxCount
	}
}

// ReadsMetrics reports whether Score reads a candidate's engine metrics under policy (only
// conductor does), so that callers read them, a copy per pod and request, only then.
func ReadsMetrics(policy string) bool { return policy == pdknobs.PrefillConductor }

// Hybrid is AIBrix's hybrid_cache_load: r = m/100, d = 1 − r²·factor, load·d when load ≥ 1
// else d.
func Hybrid(load, m, factor float64) float64 {
	r := m / 100
	d := 1 - r*r*factor
	if load >= 1 {
		return load * d
	}
	return d
}

// PrefillCostMs is the prefill term 0.001·tokens^1.5 + 5 (0 for no tokens).
func PrefillCostMs(tokens float64) float64 {
	if tokens <= 0 {
		return 0
	}
	return prefillA*math.Pow(tokens, prefillB) + prefillC
}

// ConductorTTFT estimates TTFT in ms: queue + prefix + prefill.
func ConductorTTFT(count, matchPct float64, totalTokens int, m *engineattr.Metrics) float64 {
	matched := float64(totalTokens) * matchPct / 100
	unmatched := float64(totalTokens) - matched
	avgPrefillMs := PrefillCostMs(fallbackPrefillTokens)
	if m != nil && m.HasPrefillTimeMean && m.PrefillTimeMean > 0 {
		avgPrefillMs = m.PrefillTimeMean * 1000
	}
	queue := 0.0
	if count > 0 {
		queue = count * avgPrefillMs
	}
	prefix := 0.0
	if matched > 0 {
		prefix = prefixA*matched + prefixB
	}
	return queue + prefix + PrefillCostMs(unmatched)
}

// StdDevSkip marks candidates whose count exceeds mean + sigma·stddev (sample std-dev, n−1
// divisor, 0 when n ≤ 1). It returns keep flags.
func StdDevSkip(counts []float64, sigma float64) []bool {
	return AppendStdDevSkip(nil, counts, sigma)
}

// AppendStdDevSkip is StdDevSkip appending the flags to dst, for a caller that reuses a buffer.
func AppendStdDevSkip(dst []bool, counts []float64, sigma float64) []bool {
	out := slices.Grow(dst, len(counts))[:len(dst)+len(counts)]
	keep := out[len(dst):]
	clear(keep)
	n := float64(len(counts))
	mean, sd := 0.0, 0.0
	for _, c := range counts {
		mean += c
	}
	if n > 0 {
		mean /= n
	}
	if n > 1 {
		for _, c := range counts {
			sd += (c - mean) * (c - mean)
		}
		sd = math.Sqrt(sd / (n - 1))
	}
	for i, c := range counts {
		keep[i] = !(c > mean+sigma*sd)
	}
	return out
}

// FastPath is AIBrix's prefill load-imbalance check: when max − min of the in-flight counts is
// strictly greater than minSpread, it returns the indices tied at the minimum (the caller picks
// one uniformly at random) and the reason.
func FastPath(counts []float64, minSpread int) ([]int, string) {
	if len(counts) == 0 {
		return nil, ""
	}
	lo, hi := counts[0], counts[0]
	for _, c := range counts {
		lo, hi = math.Min(lo, c), math.Max(hi, c)
	}
	if hi-lo <= float64(minSpread) {
		return nil, ""
	}
	var idx []int
	for i, c := range counts {
		if c == lo {
			idx = append(idx, i)
		}
	}
	return idx, fmt.Sprintf("prefill count spread %g > %d", hi-lo, minSpread)
}
