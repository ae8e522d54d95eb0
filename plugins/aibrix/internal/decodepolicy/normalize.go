package decodepolicy

import "math"

// Normalize turns lower-is-better scores into GIE's [0,1], higher-is-better: min-max over the
// candidates, (max − x)/(max − min); all equal finite scores → 1; NaN and +Inf → 0 (a pod
// AIBrix would skip or never pick). The order of finite scores is preserved exactly, so a
// max-score picker picks AIBrix's argmin.
func Normalize(raw []float64) []float64 {
	out := make([]float64, len(raw))
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range raw {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	for i, v := range raw {
		switch {
		case math.IsNaN(v) || math.IsInf(v, 1):
			out[i] = 0
		case math.IsInf(v, -1):
			out[i] = 1
		case hi == lo:
			out[i] = 1
		default:
			out[i] = (hi - v) / (hi - lo)
		}
	}
	return out
}

// NormalizeFor is what an AIBrix scorer returns to GIE: Normalize(raw), each score keyed by
// the endpoint it belongs to (raw[i] is eps[i]'s). Generic so this package needs no GIE types.
func NormalizeFor[E comparable](eps []E, raw []float64) map[E]float64 {
	norm := Normalize(raw)
	out := make(map[E]float64, len(eps))
	for i, ep := range eps {
		out[ep] = norm[i]
	}
	return out
}
