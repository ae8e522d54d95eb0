package routing

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
	"github.com/pdgate/pdgate/cmd/pdgate/loadgen"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// SLO multipliers of the derived goodput SLOs, as `pdgate bench sim goodput` derives them:
// TTFT = x × the unloaded prefill of the azure slice's median prompt, TPOT = x × the unloaded
// decode step (batch 1, the median prompt plus half the mean output resident).
const (
	interactiveTTFTx, interactiveTPOTx = 5, 1.5
	relaxedTTFTx, relaxedTPOTx         = 25, 7
)

// DeriveSLOs returns the interactive and relaxed SLOs for prompts of the given median length.
func DeriveSLOs(p *costmodel.Profile, medianPrompt, meanOutput float64) []report.SLO {
	n := int(medianPrompt)
	chunk := p.ChunkedPrefillTokens
	if chunk <= 0 {
		chunk = max(n, 1)
	}
	prefill := time.Duration((n+chunk-1)/chunk)*p.PrefillOverhead() + p.PrefillSpan(0, n)
	step := p.DecodeStep(1, int(medianPrompt+meanOutput/2))
	up := func(d, to time.Duration) time.Duration { return (d + to - 1) / to * to }
	mk := func(name string, tx, px float64) report.SLO {
		return report.SLO{Name: name, TTFT: up(time.Duration(tx*float64(prefill)), 10*time.Millisecond),
			TPOT: up(time.Duration(px*float64(step)), 500*time.Microsecond)}
	}
	return []report.SLO{mk("interactive", interactiveTTFTx, interactiveTPOTx), mk("relaxed", relaxedTTFTx, relaxedTPOTx)}
}

// jobMedians are the median prompt and mean output of a phase's jobs.
func jobMedians(jobs []Job) (median, meanOut float64) {
	if len(jobs) == 0 {
		return 0, 0
	}
	ps := make([]int, len(jobs))
	for i, j := range jobs {
		ps[i] = j.Prompt
		meanOut += float64(j.Output)
	}
	slices.Sort(ps)
	return float64(ps[len(ps)/2]), meanOut / float64(len(jobs))
}

// attainments are the phase's SLO attainments by SLO name (failures count as misses).
func attainments(samples []loadgen.Sample, phase string, timeScale float64, slos []report.SLO) map[string]float64 {
	out := map[string]float64{}
	for _, s := range slos {
		sent, good := 0, 0
		for _, x := range samples {
			if !strings.HasPrefix(x.Kind, phase+"/") {
				continue
			}
			sent++
			if MeetsSLO(x, timeScale, SLO{TTFT: s.TTFT, TPOT: s.TPOT}) {
				good++
			}
		}
		if sent > 0 {
			out[s.Name] = float64(good) / float64(sent)
		}
	}
	return out
}

// GoodputPerGPU is a policy's highest azure request rate per GPU with ≥ 90 % attainment, by
// SLO name, read from its azure phases (the sweep of loads).
func GoodputPerGPU(res *Results, pr PolicyResult) map[string]report.MaxRate {
	gpus := res.FleetGPUs[pr.Policy.Fleet]
	out := map[string]report.MaxRate{}
	if gpus <= 0 {
		return out
	}
	for _, s := range res.SLOs {
		var pts []report.RatePoint
		for _, ph := range res.Phases {
			c, ok := pr.Cells[ph.Name]
			if ph.Workload != WorkloadAzure || !ok || c.Requests == 0 {
				continue
			}
			pts = append(pts, report.RatePoint{Rate: ph.RateRPS / float64(gpus), Attainment: c.Attainment[s.Name]})
		}
		if len(pts) > 0 {
			out[s.Name] = report.MaxRateAt(pts, report.GoodputTarget)
		}
	}
	return out
}

func goodputSection(res *Results) report.Section {
	var names []string
	for _, s := range res.SLOs {
		names = append(names, s.String())
	}
	t := report.Table{Title: "Goodput per GPU on the Azure phases (≥ 90 % of requests within both targets); SLOs: " + strings.Join(names, "; "),
		Columns: []string{"policy", "fleet"}}
	for _, s := range res.SLOs {
		t.Columns = append(t.Columns, s.Name+" req/s per GPU", "× combined-only")
	}
	base := map[string]float64{}
	for _, p := range res.Policies {
		if p.Policy.Name == PolicyCombined {
			for k, v := range p.Goodput {
				base[k] = v.Value()
			}
		}
	}
	att := report.Table{Title: "SLO attainment per phase", Columns: []string{"phase", "policy", "req/s per GPU"}}
	for _, s := range res.SLOs {
		att.Columns = append(att.Columns, s.Name)
	}
	for _, p := range res.Policies {
		if p.Error != "" {
			continue
		}
		row := []string{p.Policy.Name, p.Policy.Fleet}
		for _, s := range res.SLOs {
			m, ok := p.Goodput[s.Name]
			ratio := math.NaN()
			if b := base[s.Name]; ok && b > 0 {
				ratio = m.Value() / b
			}
			v := "–"
			if ok {
				v = m.String()
			}
			row = append(row, v, report.F(ratio, 2))
		}
		t.Rows = append(t.Rows, row)
	}
	for _, ph := range res.Phases {
		for _, p := range res.Policies {
			c, ok := p.Cells[ph.Name]
			if p.Error != "" || !ok {
				continue
			}
			row := []string{ph.Name, p.Policy.Name, report.F(ph.RateRPS/float64(max(res.FleetGPUs[p.Policy.Fleet], 1)), 2)}
			for _, s := range res.SLOs {
				row = append(row, report.F(c.Attainment[s.Name], 3))
			}
			att.Rows = append(att.Rows, row)
		}
	}
	var plots []report.Plot
	for _, s := range res.SLOs {
		pl := report.Plot{File: fmt.Sprintf("routing-attainment-%s.png", s.Name),
			Title:  "SLO attainment vs rate, azure-conv, " + s.String(),
			XLabel: "request rate per GPU (req/s, model time)", YLabel: "SLO attainment (share of requests)", Kind: report.LinesPoints}
		for _, p := range res.Policies {
			ser := report.Series{Name: p.Policy.Name}
			for _, ph := range res.Phases {
				if c, ok := p.Cells[ph.Name]; ok && ph.Workload == WorkloadAzure && c.Requests > 0 {
					ser.X = append(ser.X, ph.RateRPS/float64(max(res.FleetGPUs[p.Policy.Fleet], 1)))
					ser.Y = append(ser.Y, c.Attainment[s.Name])
				}
			}
			if len(ser.X) > 0 {
				pl.Series = append(pl.Series, ser)
			}
		}
		if len(pl.Series) > 0 {
			plots = append(plots, pl)
		}
	}
	return report.Section{Title: "Goodput per GPU under latency SLOs (DistServe)",
		Text: "SLO attainment = share of a phase's requests (failures count as misses) served with TTFT and TPOT both within the SLO (model time). " +
			"Goodput per GPU = the highest azure request rate per GPU with attainment ≥ 90 %, interpolated between the load phases " +
			"at the first crossing (\"≥ x\": never below 90 % within the phases run; \"< x\": below already at the lowest load, counted as 0). " +
			"Both fleets have the same GPUs and get the same absolute rate. Unless --slos names them, the SLOs are derived from the cost profile " +
			"as `pdgate bench sim goodput` derives them: interactive TTFT = 5 × the unloaded prefill of the slice's median prompt, TPOT = 1.5 × " +
			"the unloaded decode step; relaxed 25 × and 7 ×.",
		Tables: []report.Table{t, att}, Plots: plots}
}
