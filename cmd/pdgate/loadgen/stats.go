// Package loadgen drives a workload through a gateway and summarises what came back:
// statuses, decision types, per-pod legs and TTFT/TPOT/E2E percentiles.
package loadgen

import (
	"math"
	"sort"
	"time"
)

// Percentiles are latency quantiles in milliseconds.
type Percentiles struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50"`
	P90   float64 `json:"p90"`
	P99   float64 `json:"p99"`
	Mean  float64 `json:"mean"`
	Max   float64 `json:"max"`
}

// Summarize computes nearest-rank percentiles (the smallest value with at least q of the
// samples at or below it). An empty sample gives zeros.
func Summarize(samples []time.Duration) Percentiles {
	if len(samples) == 0 {
		return Percentiles{}
	}
	ms := make([]float64, len(samples))
	sum := 0.0
	for i, d := range samples {
		ms[i] = float64(d) / float64(time.Millisecond)
		sum += ms[i]
	}
	sort.Float64s(ms)
	q := func(p float64) float64 {
		rank := int(math.Ceil(p*float64(len(ms)))) - 1
		if rank < 0 {
			rank = 0
		}
		return round3(ms[rank])
	}
	return Percentiles{Count: len(ms), P50: q(0.50), P90: q(0.90), P99: q(0.99),
		Mean: round3(sum / float64(len(ms))), Max: round3(ms[len(ms)-1])}
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }
