package report

import (
	"math"
	"sort"
	"strconv"
)

// CDF returns the empirical distribution of values: x sorted ascending, y[i] the share of
// values ≤ x[i]. Ties collapse to their highest share, so the curve is a function.
func CDF(values []float64) (x, y []float64) {
	s := append([]float64(nil), values...)
	sort.Float64s(s)
	n := float64(len(s))
	for i, v := range s {
		if len(x) > 0 && x[len(x)-1] == v {
			y[len(y)-1] = float64(i+1) / n
			continue
		}
		x = append(x, v)
		y = append(y, float64(i+1)/n)
	}
	return x, y
}

// Percentile is the nearest-rank percentile of an ascending slice (p in [0, 100]); NaN for
// an empty slice.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	if p <= 0 {
		return sorted[0]
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank > len(sorted) {
		rank = len(sorted)
	}
	return sorted[rank-1]
}

// F formats v with digits decimals; NaN and infinities print as "–" so tables stay tidy.
func F(v float64, digits int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return strconv.FormatFloat(v, 'f', digits, 64)
}
