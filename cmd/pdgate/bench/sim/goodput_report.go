package simbench

import (
	"fmt"
	"math"
	"strings"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
)

// baselineCell is the combined-only fleet every goodput ratio is taken against.
const baselineShape = "combined"

func buildGoodputReport(d *GoodputData) *report.Report {
	rep := report.New("goodput", "Goodput per GPU under latency SLOs (pdgate bench sim goodput)")
	rep.Data = d
	o := d.Options
	rep.Add(report.Section{Title: "How to read this",
		Text: fmt.Sprintf("Virtual-time fleet of %d simulated GPUs (cost profile %s), GIE's scheduler with each policy's EndpointPickerConfig. "+
			"Every fleet shape has the same GPU count. For every workload, shape and policy the fleet runs at a sweep of request rates "+
			"(arrivals spanning %s of virtual time, at least %d requests per point, seed %d); **SLO attainment** is the share of requests served with TTFT and TPOT both within the SLO "+
			"(failures count as misses); **goodput** is the highest request rate per GPU with attainment ≥ %.0f %% "+
			"(linear interpolation at the first crossing; \"≥ x\": never fell below within the sweep; \"< x\": below already at the lowest rate, counted as 0). "+
			"SLOs are derived per workload from the cost profile unless --slos names them: interactive TTFT = %.1f × the unloaded prefill of the "+
			"median prompt, TPOT = %.1f × the unloaded decode step; relaxed %.1f × and %.1f ×.",
			o.Pods, d.Profile, o.Duration, o.Requests, o.Seed, 100*o.Target, o.InteractiveTTFTx, o.InteractiveTPOTx, o.RelaxedTTFTx, o.RelaxedTPOTx),
		Tables: []report.Table{workloadTable(d)}})
	for _, wl := range d.Workloads {
		var cells []GoodputCell
		for _, c := range d.Cells {
			if c.Workload == wl.Name {
				cells = append(cells, c)
			}
		}
		sec := report.Section{Title: "Workload " + wl.Name}
		cols := []string{"fleet / policy"}
		for _, s := range wl.SLOs {
			cols = append(cols, s.Name+" goodput (req/s/GPU)", "× combined-only")
		}
		t := report.Table{Title: "Goodput per GPU at ≥ 90 % attainment; SLOs: " + sloNames(wl.SLOs), Columns: cols}
		base := map[string]float64{}
		for _, c := range cells {
			if c.Shape.Name == baselineShape {
				for _, s := range wl.SLOs {
					base[s.Name] = c.MaxRate[s.Name].Value()
				}
			}
		}
		for _, c := range cells {
			row := []string{c.Cell}
			if c.Error != "" {
				row[0] += " (failed: " + c.Error + ")"
			}
			for _, s := range wl.SLOs {
				m := c.MaxRate[s.Name]
				ratio := math.NaN()
				if b := base[s.Name]; b > 0 {
					ratio = m.Value() / b
				}
				row = append(row, m.String(), report.F(ratio, 2))
			}
			t.Rows = append(t.Rows, row)
		}
		sec.Tables = append(sec.Tables, t)
		pts := report.Table{Title: "Every rate point", Columns: []string{"fleet / policy", "req/s per GPU"}}
		for _, s := range wl.SLOs {
			pts.Columns = append(pts.Columns, s.Name+" attainment")
		}
		pts.Columns = append(pts.Columns, "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "remote prefill", "failed")
		for _, c := range cells {
			for _, p := range c.Points {
				row := []string{c.Cell, report.F(p.RatePerGPU, 2)}
				for _, s := range wl.SLOs {
					row = append(row, report.F(p.Attainment[s.Name], 3))
				}
				row = append(row, f1(p.TTFT.P50), f1(p.TTFT.P99), report.F(p.TPOT.P50, 2), report.F(p.TPOT.P99, 2),
					fmt.Sprintf("%.0f %%", 100*p.PrefillShare), fmt.Sprint(p.Failed))
				pts.Rows = append(pts.Rows, row)
			}
		}
		sec.Tables = append(sec.Tables, pts)
		for _, s := range wl.SLOs {
			pl := report.Plot{File: fmt.Sprintf("goodput-%s-%s.png", wl.Name, s.Name),
				Title:  fmt.Sprintf("%s: SLO attainment vs rate, %s, %d GPUs", wl.Name, s, o.Pods),
				XLabel: "request rate per GPU (req/s)", YLabel: "SLO attainment (share of requests)", Kind: report.LinesPoints}
			for _, c := range cells {
				ser := report.Series{Name: c.Cell}
				for _, p := range c.Points {
					ser.X = append(ser.X, p.RatePerGPU)
					ser.Y = append(ser.Y, p.Attainment[s.Name])
				}
				pl.Series = append(pl.Series, ser)
			}
			sec.Plots = append(sec.Plots, pl)
		}
		rep.Add(sec)
	}
	return rep
}

func sloNames(slos []report.SLO) string {
	var s []string
	for _, x := range slos {
		s = append(s, x.String())
	}
	return strings.Join(s, "; ")
}

func workloadTable(d *GoodputData) report.Table {
	t := report.Table{Title: "Workloads and their SLOs",
		Columns: []string{"workload", "median / mean prompt", "mean output", "reusable prefix", "unloaded prefill ms", "unloaded decode step ms", "capacity estimate req/s/GPU", "SLOs"}}
	for _, w := range d.Workloads {
		t.Rows = append(t.Rows, []string{w.Name, fmt.Sprintf("%.0f / %.0f", w.Stats.MedianPrompt, w.Stats.MeanPrompt), fmt.Sprintf("%.0f", w.Stats.MeanOutput),
			fmt.Sprintf("%.0f %%", 100*w.Stats.MeanReuse), f1(w.UnloadedPrefillMs), report.F(w.UnloadedDecodeStepMs, 2), report.F(w.CapacityPerGPU, 2), sloNames(w.SLOs)})
	}
	return t
}
