package routing

import (
	"fmt"
	"math"
	"strings"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
)

// Goal is one of the routing-quality goals, evaluated on a run.
type Goal struct {
	Name     string  `json:"name"`
	Target   string  `json:"target"`
	Measured string  `json:"measured"`
	Value    float64 `json:"value"`
	// Met is false when the goal is not met or could not be evaluated (Measured says why).
	Met bool `json:"met"`
}

// Goal thresholds (docs/benchmarks.md).
const (
	goalTTFTCut   = 0.20 // recommended vs least-request, p99 TTFT, azure at 80 %
	goalTPOTRatio = 2.0  // combined-only / P/D (recommended), p99 TPOT, mixed workload
)

func cell(res *Results, policy, phase string) (CellStats, bool) {
	for _, p := range res.Policies {
		if p.Policy.Name == policy && p.Error == "" {
			c, ok := p.Cells[phase]
			return c, ok && c.OK > 0
		}
	}
	return CellStats{}, false
}

// EvaluateGoals checks both goals on the phases the run had (azure at 80 %, the mix).
func EvaluateGoals(res *Results) []Goal {
	g1 := Goal{Name: "recommended cuts p99 TTFT vs least-request (azure-conv, 80 % load)", Target: "≥ 20 %"}
	az80 := PhaseName(WorkloadAzure, 0.8)
	rec, ok1 := cell(res, PolicyRecommended, az80)
	lr, ok2 := cell(res, PolicyLeastRequest, az80)
	if ok1 && ok2 && lr.TTFT.P99 > 0 {
		g1.Value = 1 - rec.TTFT.P99/lr.TTFT.P99
		g1.Met = rec.TTFT.P99 <= (1-goalTTFTCut)*lr.TTFT.P99 // not via Value: 1-0.8 is not 0.2 in floating point
		g1.Measured = fmt.Sprintf("%.1f %% (p99 TTFT %.0f ms vs %.0f ms)", 100*g1.Value, rec.TTFT.P99, lr.TTFT.P99)
	} else {
		g1.Measured = "not measured (needs recommended and least-request at 80 % azure-conv load)"
	}
	g2 := Goal{Name: "P/D fleet (recommended) cuts p99 TPOT vs combined-only (mixed workload)", Target: "≥ 2×"}
	var mixed string
	for _, ph := range res.Phases {
		if ph.Workload == WorkloadMixed {
			mixed = ph.Name
		}
	}
	pd, ok1 := cell(res, PolicyRecommended, mixed)
	comb, ok2 := cell(res, PolicyCombined, mixed)
	if mixed != "" && ok1 && ok2 && pd.TPOT.P99 > 0 {
		g2.Value = comb.TPOT.P99 / pd.TPOT.P99
		g2.Met = g2.Value >= goalTPOTRatio
		g2.Measured = fmt.Sprintf("%.2f× (p99 TPOT %.1f ms combined vs %.1f ms P/D)", g2.Value, comb.TPOT.P99, pd.TPOT.P99)
	} else {
		g2.Measured = "not measured (needs recommended and combined-only on the mixed phase)"
	}
	return []Goal{g1, g2}
}

// BuildReport assembles the Markdown/JSON/PNG report.
func BuildReport(res *Results) *report.Report {
	r := report.New("routing", "Routing quality: policies on the lab replaying the Azure LLM trace and a synthetic mix")
	r.Data = res
	if !res.Started.IsZero() {
		r.Started = res.Started
	}
	r.Add(setupSection(res))
	r.Add(resultsSection(res))
	r.Add(goodputSection(res))
	r.Add(goalsSection(res))
	r.Add(plotsSection(res))
	return r
}

func setupSection(res *Results) report.Section {
	var b strings.Builder
	fmt.Fprintf(&b, "Real processes (simulators with the calibrated Llama-3.1-8B/H100 cost model, sidecars, EPP, dev gateway) per policy; "+
		"P/D fleet %d GPUs, combined-only fleet %d GPUs. Time scale %g (model seconds per wall second): every latency below is model time "+
		"= wall time × %g, so the lab's own CPU overhead is scaled up with it. Azure phases replay trace rows [%d, %d) with the trace's "+
		"inter-arrival shape compressed to the target rate; the mix is short chat, long RAG and 6-turn sessions in turn, Poisson arrivals. "+
		"Load = share of the P/D fleet's capacity; the combined-only fleet gets the same absolute rate. "+
		"The goodput column of the results = share of a phase's requests that succeeded with TTFT ≤ %s and TPOT ≤ %s (model time); goodput per GPU under named SLOs follows the results.\n\n",
		res.FleetGPUs[FleetPD], res.FleetGPUs[FleetCombined], res.TimeScale, res.TimeScale, res.TraceSlice[0], res.TraceSlice[1],
		res.SLO.TTFT, res.SLO.TPOT)
	b.WriteString("Capacity is derived from the cost model, not measured through the lab: the simulator's own batching scheduler " +
		"runs each role closed-loop at max batch on a virtual clock over the phase's requests; P/D = min(prefill pods × prefill rate, " +
		"decode pods × decode rate). Prefix-cache hits are not counted, so sessions make the mix's real load a little lower than nominal.")
	capRow := func(name string, c Capacity) []string {
		return []string{name, report.F(c.PrefillPodRPS, 1), report.F(c.DecodePodRPS, 1), report.F(c.CombinedPodRPS, 1),
			report.F(c.PDRPS, 1), report.F(c.CombinedRPS, 1)}
	}
	t := report.Table{Title: "Capacity (requests per model second)",
		Columns: []string{"workload", "prefill pod", "decode pod", "combined pod", "P/D fleet", "combined fleet"},
		Rows:    [][]string{capRow(WorkloadAzure, res.AzureCapacity)}}
	if res.MixedCapacity.PDRPS > 0 {
		t.Rows = append(t.Rows, capRow(WorkloadMixed, res.MixedCapacity))
	}
	if res.MooncakeCapacity.PDRPS > 0 {
		t.Rows = append(t.Rows, capRow(WorkloadMooncake, res.MooncakeCapacity))
	}
	pt := report.Table{Title: "Policies", Columns: []string{"policy", "fleet", "config", "what"}}
	for _, p := range res.Policies {
		pt.Rows = append(pt.Rows, []string{p.Policy.Name, p.Policy.Fleet, "config/bench/routing/" + p.Policy.Config, p.Policy.Note})
	}
	return report.Section{Title: "Setup", Text: b.String(), Tables: []report.Table{t, pt}}
}

func resultsSection(res *Results) report.Section {
	t := report.Table{Columns: []string{"phase", "policy", "TTFT p50/p90/p99 ms", "TPOT p50/p90/p99 ms", "E2E p50/p90/p99 ms", "goodput", "ok/sent", "lab CPU ms/req", "load avg"}}
	q := func(v Quantiles, d int) string {
		return report.F(v.P50, d) + " / " + report.F(v.P90, d) + " / " + report.F(v.P99, d)
	}
	for _, ph := range res.Phases {
		for _, p := range res.Policies {
			if p.Error != "" {
				t.Rows = append(t.Rows, []string{ph.Name, p.Policy.Name, "failed: " + p.Error, "", "", "", "", "", ""})
				continue
			}
			c := p.Cells[ph.Name]
			t.Rows = append(t.Rows, []string{ph.Name, p.Policy.Name, q(c.TTFT, 0), q(c.TPOT, 1), q(c.E2E, 0),
				report.F(c.Goodput, 3), fmt.Sprintf("%d/%d", c.OK, c.Requests),
				report.F(1000*p.LabCPUSeconds/math.Max(float64(p.Requests), 1), 1), p.LoadAverage})
		}
	}
	return report.Section{Title: "Results per phase and policy",
		Text:   "Model-time latencies (nearest-rank percentiles). Lab CPU is every lab process's CPU time over the policy's whole run divided by its requests; load avg is the machine's 1-minute load average when the policy's run ended.",
		Tables: []report.Table{t}}
}

func goalsSection(res *Results) report.Section {
	t := report.Table{Columns: []string{"goal", "target", "measured", "met"}}
	for _, g := range res.Goals {
		met := "not met"
		if g.Met {
			met = "met"
		}
		t.Rows = append(t.Rows, []string{g.Name, g.Target, g.Measured, met})
	}
	return report.Section{Title: "Goals", Tables: []report.Table{t}}
}

func plotsSection(res *Results) report.Section {
	var plots []report.Plot
	az80 := PhaseName(WorkloadAzure, 0.8)
	cdf := report.Plot{File: "routing-ttft-cdf-80.png", Title: "TTFT CDF, azure-conv at 80 % load",
		XLabel: "TTFT (model ms)", YLabel: "share of requests", LogX: true}
	for _, p := range res.Policies {
		if c, ok := p.Cells[az80]; ok && len(c.TTFTs) > 0 {
			x, y := report.CDF(c.TTFTs)
			cdf.Series = append(cdf.Series, report.Series{Name: p.Policy.Name, X: x, Y: y})
		}
	}
	if len(cdf.Series) > 0 {
		plots = append(plots, cdf)
	}
	p99 := report.Plot{File: "routing-p99-ttft-vs-load.png", Title: "p99 TTFT vs load, azure-conv",
		XLabel: "load (% of P/D capacity)", YLabel: "p99 TTFT (model ms)", LogY: true, Kind: report.LinesPoints}
	good := report.Plot{File: "routing-goodput-vs-load.png", Title: "Goodput vs load, azure-conv",
		XLabel: "load (% of P/D capacity)", YLabel: "goodput (share within both SLOs)", Kind: report.LinesPoints}
	for _, p := range res.Policies {
		var sx, sy, gy []float64
		for _, ph := range res.Phases {
			c, ok := p.Cells[ph.Name]
			if ph.Workload != WorkloadAzure || !ok || c.OK == 0 {
				continue
			}
			sx = append(sx, 100*ph.Load)
			sy = append(sy, c.TTFT.P99)
			gy = append(gy, c.Goodput)
		}
		if len(sx) > 0 {
			p99.Series = append(p99.Series, report.Series{Name: p.Policy.Name, X: sx, Y: sy})
			good.Series = append(good.Series, report.Series{Name: p.Policy.Name, X: sx, Y: gy})
		}
	}
	if len(p99.Series) > 0 {
		plots = append(plots, p99, good)
	}
	return report.Section{Title: "Plots", Plots: plots}
}
