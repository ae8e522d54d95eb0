package routing

import (
	"sort"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
	"github.com/pdgate/pdgate/cmd/pdgate/loadgen"
)

// SLO is the per-request service objective goodput counts against (model time).
type SLO struct {
	TTFT time.Duration `json:"ttft"`
	TPOT time.Duration `json:"tpot"`
}

// Quantiles are nearest-rank percentiles in model milliseconds (NaN when no sample).
type Quantiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
}

// CellStats summarises one policy on one phase.
type CellStats struct {
	Requests int `json:"requests"`
	OK       int `json:"ok"`
	// Latencies in model milliseconds: wall milliseconds x the lab's time scale.
	TTFT Quantiles `json:"ttftMs"`
	TPOT Quantiles `json:"tpotMs"`
	E2E  Quantiles `json:"e2eMs"`
	// Goodput is the share of the phase's requests that succeeded within both SLOs.
	Goodput float64 `json:"goodput"`
	// Attainment is the same share for each named goodput SLO (Results.SLOs).
	Attainment map[string]float64 `json:"attainment,omitempty"`
	Decisions  map[string]int     `json:"decisions"`
	// TTFTs are the successful requests' TTFTs (model ms), for the CDF plot.
	TTFTs []float64 `json:"-"`
}

// MeetsSLO reports whether one request met both objectives: it succeeded, its first token
// came within slo.TTFT and, when it produced more than one token, its mean time per output
// token is within slo.TPOT. Times are model time (wall x timeScale).
func MeetsSLO(s loadgen.Sample, timeScale float64, slo SLO) bool {
	if !s.OK || s.Tokens < 1 || s.TTFTMS <= 0 {
		return false
	}
	if s.TTFTMS*timeScale > ms(slo.TTFT) {
		return false
	}
	return s.Tokens < 2 || s.TPOTMS*timeScale <= ms(slo.TPOT)
}

// Summarize computes a phase's statistics from the run's samples: the samples whose kind
// starts with "<phase>/", latencies scaled to model time.
func Summarize(samples []loadgen.Sample, phase string, timeScale float64, slo SLO) CellStats {
	c := CellStats{Decisions: map[string]int{}}
	var ttft, tpot, e2e []float64
	good := 0
	for _, s := range samples {
		if !strings.HasPrefix(s.Kind, phase+"/") {
			continue
		}
		c.Requests++
		if s.Decision != "" {
			c.Decisions[s.Decision]++
		}
		if !s.OK {
			continue
		}
		c.OK++
		e2e = append(e2e, s.E2EMS*timeScale)
		if s.Tokens > 0 && s.TTFTMS > 0 {
			ttft = append(ttft, s.TTFTMS*timeScale)
		}
		if s.Tokens > 1 {
			tpot = append(tpot, s.TPOTMS*timeScale)
		}
		if MeetsSLO(s, timeScale, slo) {
			good++
		}
	}
	if c.Requests > 0 {
		c.Goodput = float64(good) / float64(c.Requests)
	}
	c.TTFT, c.TPOT, c.E2E = quantiles(ttft), quantiles(tpot), quantiles(e2e)
	c.TTFTs = ttft
	return c
}

func quantiles(v []float64) Quantiles {
	sort.Float64s(v)
	return Quantiles{P50: report.Percentile(v, 50), P90: report.Percentile(v, 90), P99: report.Percentile(v, 99)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
