package report

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/internal/commalist"
)

// SLO is one named latency objective, as DistServe (OSDI '24) defines goodput: a request
// attains the SLO when it was served with TTFT ≤ TTFT and, when it produced more than one
// token, TPOT ≤ TPOT. Failed requests never attain it.
type SLO struct {
	Name string        `json:"name"`
	TTFT time.Duration `json:"ttft"`
	TPOT time.Duration `json:"tpot"`
}

// String is "interactive (TTFT ≤ 190 ms, TPOT ≤ 10.5 ms)": how every report names an SLO.
func (s SLO) String() string {
	return fmt.Sprintf("%s (TTFT ≤ %s, TPOT ≤ %s)", s.Name, fmtDur(s.TTFT), fmtDur(s.TPOT))
}

func fmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	if ms >= 1000 {
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", ms/1000), "0"), ".") + " s"
	}
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", ms), "0"), ".") + " ms"
}

// ParseSLOs reads "name=TTFT/TPOT[,name=TTFT/TPOT...]", e.g. "interactive=200ms/10ms,relaxed=1s/50ms".
func ParseSLOs(s string) ([]SLO, error) {
	var out []SLO
	seen := map[string]bool{}
	for _, item := range commalist.Split(s) {
		name, targets, ok := strings.Cut(item, "=")
		ttft, tpot, ok2 := strings.Cut(targets, "/")
		if !ok || !ok2 || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("SLO %q: want name=TTFT/TPOT, e.g. interactive=200ms/10ms", item)
		}
		a, err := time.ParseDuration(strings.TrimSpace(ttft))
		if err != nil || a <= 0 {
			return nil, fmt.Errorf("SLO %q: TTFT %q is not a positive duration", item, ttft)
		}
		b, err := time.ParseDuration(strings.TrimSpace(tpot))
		if err != nil || b <= 0 {
			return nil, fmt.Errorf("SLO %q: TPOT %q is not a positive duration", item, tpot)
		}
		name = strings.TrimSpace(name)
		if seen[name] {
			return nil, fmt.Errorf("SLO %q named twice", name)
		}
		seen[name] = true
		out = append(out, SLO{Name: name, TTFT: a, TPOT: b})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no SLO in %q", s)
	}
	return out, nil
}

// Attainment is the share of sent requests that attained slo. ttftMs and tpotMs are the
// served requests' samples in milliseconds, index-aligned; a NaN TPOT marks a single-token
// response (TTFT alone decides). Requests sent but not served (sent − len(ttftMs)) are misses.
// Zero when nothing was sent.
func Attainment(ttftMs, tpotMs []float64, sent int, slo SLO) float64 {
	if sent <= 0 {
		return 0
	}
	ttftMax := float64(slo.TTFT) / float64(time.Millisecond)
	tpotMax := float64(slo.TPOT) / float64(time.Millisecond)
	good := 0
	for i, t := range ttftMs {
		if math.IsNaN(t) || t > ttftMax {
			continue
		}
		if i < len(tpotMs) && !math.IsNaN(tpotMs[i]) && tpotMs[i] > tpotMax {
			continue
		}
		good++
	}
	return float64(good) / float64(sent)
}

// RatePoint is one measured request rate and the SLO attainment at it.
type RatePoint struct {
	Rate       float64 `json:"rate"`
	Attainment float64 `json:"attainment"`
}

// MaxRate is the highest request rate at which attainment stays at or above the target.
type MaxRate struct {
	// Rate is the interpolated rate; with Bound "<" the lowest rate measured (attainment was
	// below target already there), with Bound "≥" the highest (never fell below target).
	Rate  float64 `json:"rate"`
	Bound string  `json:"bound,omitempty"`
}

// String prints the rate with its bound: "7.42", "< 1.00", "≥ 12.00".
func (m MaxRate) String() string {
	if m.Bound == "" {
		return F(m.Rate, 2)
	}
	return m.Bound + " " + F(m.Rate, 2)
}

// Value is the figure to compare: the rate, or 0 when even the lowest rate missed the target.
func (m MaxRate) Value() float64 {
	if m.Bound == "<" {
		return 0
	}
	return m.Rate
}

// MaxRateAt finds the highest rate with attainment ≥ target the way a rate sweep is read
// (DistServe's goodput): points are sorted by rate, the first point below target is the
// crossing, and the rate is interpolated linearly between it and the point before. Points
// after the first crossing are ignored (a recovery at a higher rate is noise, not capacity).
func MaxRateAt(points []RatePoint, target float64) MaxRate {
	if len(points) == 0 {
		return MaxRate{Rate: math.NaN(), Bound: "<"}
	}
	ps := append([]RatePoint(nil), points...)
	sort.SliceStable(ps, func(i, j int) bool { return ps[i].Rate < ps[j].Rate })
	if ps[0].Attainment < target {
		return MaxRate{Rate: ps[0].Rate, Bound: "<"}
	}
	for i := 1; i < len(ps); i++ {
		if ps[i].Attainment >= target {
			continue
		}
		lo, hi := ps[i-1], ps[i]
		if hi.Rate == lo.Rate || lo.Attainment == hi.Attainment {
			return MaxRate{Rate: lo.Rate}
		}
		f := (lo.Attainment - target) / (lo.Attainment - hi.Attainment)
		return MaxRate{Rate: lo.Rate + f*(hi.Rate-lo.Rate)}
	}
	return MaxRate{Rate: ps[len(ps)-1].Rate, Bound: "≥"}
}

// GoodputTarget is the attainment the field's goodput uses (DistServe: 90 %).
const GoodputTarget = 0.9
