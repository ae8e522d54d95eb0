package simbench

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
)

// Data is the bench's raw output (sim.json).
type Data struct {
	Options        Options      `json:"options"`
	Profile        string       `json:"profile"`
	CapacityPerGPU float64      `json:"capacityPerGPU"`
	WallSeconds    float64      `json:"wallSeconds"`
	Calibration    *Calibration `json:"calibration"`
	// Trace is the replayed workload's trace (name, file, means; reuse for Mooncake).
	Trace *TraceInfo `json:"trace"`
	Runs  []RunData  `json:"runs"`
}

// RunData is one policy at one load.
type RunData struct {
	Policy  string  `json:"policy"`
	Load    float64 `json:"load"`
	Rate    float64 `json:"rate"`
	Summary Summary `json:"summary"`
	ttft    []float64
}

func f1(v float64) string { return report.F(v, 1) }

func buildReport(d *Data, policies []Policy) *report.Report {
	rep := report.New("sim", "Cluster simulation at scale (pdgate bench sim)")
	rep.Data = d
	c := d.Calibration
	rep.Add(report.Section{Title: "Calibration against the real-process lab",
		Text: fmt.Sprintf("Same topology (%s), same workload slice (%s, first %d requests, seed and concurrency as recorded), "+
			"run in virtual time (model ms). Data-path overheads measured in the lab run: route %.1f ms and hop %.2f ms (medians of idle single-request probes split by the processes' stage histograms), step %.2f ms (lab TPOT p50 − engines-alone TPOT p50). "+
			"p50 TTFT within %.0f %%: **%s** (error %+.1f %%).",
			c.Topology, c.Workload, c.Requests, ms(c.Overheads.Route), ms(c.Overheads.Hop), ms(c.Overheads.Step),
			100*c.Tolerance, metWord(c.Met), 100*c.ErrorP50),
		Tables: []report.Table{{Title: "TTFT and TPOT, lab vs simulation (ms)",
			Columns: []string{"", "TTFT p50", "TTFT p90", "TTFT p99", "TPOT p50", "E2E p50"},
			Rows: [][]string{
				{"lab (real processes)", f1(c.LabTTFT.P50), f1(c.LabTTFT.P90), f1(c.LabTTFT.P99), report.F(c.LabTPOTP50, 2), f1(c.LabE2EP50)},
				{"simulation", f1(c.SimTTFT.P50), f1(c.SimTTFT.P90), f1(c.SimTTFT.P99), report.F(c.SimTPOTP50, 2), f1(c.SimE2EP50)},
				{"simulation, engines alone", f1(c.ModelOnly.P50), f1(c.ModelOnly.P90), f1(c.ModelOnly.P99), report.F(c.ModelResult.TPOT.P50, 2), f1(c.ModelResult.E2E.P50)},
			}}},
	})
	if c.Components != nil {
		rep.Sections[len(rep.Sections)-1].Tables = append(rep.Sections[len(rep.Sections)-1].Tables, report.Table{
			Title:   "Engine level: mean time from a prefill leg's arrival at the prefill engine to its first token (ms)",
			Columns: []string{"lab (simulator's own histogram)", "simulation", "simulation, engines alone"},
			Rows: [][]string{{f1(c.Components.PrefillEngineTTFT), f1(c.SimSummary.EngineTTFT.Prefill),
				f1(c.ModelResult.EngineTTFT.Prefill)}}})
	}
	baseline := map[float64]float64{}
	for _, r := range d.Runs {
		if r.Policy == Policies[0].Name {
			baseline[r.Load] = r.Summary.EPPCPUMicrosPerRequest
		}
	}
	loads := []float64{}
	byLoad := map[float64][]RunData{}
	for _, r := range d.Runs {
		if _, ok := byLoad[r.Load]; !ok {
			loads = append(loads, r.Load)
		}
		byLoad[r.Load] = append(byLoad[r.Load], r)
	}
	sort.Float64s(loads)
	for _, load := range loads {
		t := report.Table{Columns: []string{"policy", "TTFT p50", "p90", "p99", "TPOT p50", "p99", "E2E p50", "p99",
			"goodput", "decode max/min", "prefill max/min", "EPP CPU µs/req", "× stock GIE", "failed", "EPP answers", "wall s"}}
		for _, r := range byLoad[load] {
			s := r.Summary
			ratio := math.NaN()
			if b := baseline[load]; b > 0 {
				ratio = s.EPPCPUMicrosPerRequest / b
			}
			failed := 0
			for _, n := range s.Failed {
				failed += n
			}
			t.Rows = append(t.Rows, []string{r.Policy, f1(s.TTFT.P50), f1(s.TTFT.P90), f1(s.TTFT.P99),
				report.F(s.TPOT.P50, 2), report.F(s.TPOT.P99, 2), f1(s.E2E.P50), f1(s.E2E.P99), report.F(s.Goodput, 3),
				report.F(s.DecodeSpread, 2), report.F(s.PrefillSpread, 2), report.F(s.EPPCPUMicrosPerRequest, 0),
				report.F(ratio, 2), fmt.Sprint(failed), answersCell(s.EPPAnswers), f1(s.WallSeconds)})
		}
		sec := report.Section{Title: fmt.Sprintf("Load %.2f (%.0f req/s offered)", load, byLoad[load][0].Rate),
			Text: fmt.Sprintf("%d simulated GPUs, %d requests per policy. Latencies in ms; goodput = share of requests with TTFT ≤ %v and TPOT ≤ %v. "+
				"max/min = requests per pod among the pods serving that leg.", d.Options.Pods, d.Options.Requests, d.Options.SLO.TTFT, d.Options.SLO.TPOT),
			Tables: []report.Table{t}}
		if tt, ok := turnsTable(byLoad[load]); ok {
			sec.Tables = append(sec.Tables, tt)
		}
		cdf := report.Plot{File: fmt.Sprintf("ttft-cdf-load-%.2f.png", load), Title: fmt.Sprintf("TTFT CDF, load %.2f, %d GPUs", load, d.Options.Pods),
			XLabel: "TTFT (ms)", YLabel: "share of requests", LogX: true}
		for _, r := range byLoad[load] {
			x, y := report.CDF(r.ttft)
			x, y = thin(x, y, 400)
			cdf.Series = append(cdf.Series, report.Series{Name: r.Policy, X: x, Y: y})
		}
		sec.Plots = append(sec.Plots, cdf)
		rep.Add(sec)
	}
	if len(loads) > 1 {
		p99 := report.Plot{File: "p99-ttft-vs-load.png", Title: "p99 TTFT vs offered load", XLabel: "load (share of estimated capacity)",
			YLabel: "p99 TTFT (ms)", LogY: true, Kind: report.LinesPoints}
		good := report.Plot{File: "goodput-vs-load.png", Title: "Goodput vs offered load", XLabel: "load (share of estimated capacity)",
			YLabel: "goodput", Kind: report.LinesPoints}
		for _, p := range policies {
			var xs, ys, gs []float64
			for _, r := range d.Runs {
				if r.Policy == p.Name {
					xs, ys, gs = append(xs, r.Load), append(ys, r.Summary.TTFT.P99), append(gs, r.Summary.Goodput)
				}
			}
			p99.Series = append(p99.Series, report.Series{Name: p.Name, X: xs, Y: ys})
			good.Series = append(good.Series, report.Series{Name: p.Name, X: xs, Y: gs})
		}
		rep.Add(report.Section{Title: "Latency and goodput vs load", Plots: []report.Plot{p99, good}})
	}
	var about report.Table
	about.Columns = []string{"policy", "config", "fleet", "what"}
	for _, p := range policies {
		cfg := p.Config
		if cfg == "" {
			cfg = "(GIE default)"
		}
		about.Rows = append(about.Rows, []string{p.Name, cfg, p.Fleet, p.About})
	}
	rep.Add(report.Section{Title: "Policies", Tables: []report.Table{about}})
	return rep
}

// thin keeps at most n points of a CDF (evenly by rank, the last point kept).
func thin(x, y []float64, n int) ([]float64, []float64) {
	if len(x) <= n {
		return x, y
	}
	var ox, oy []float64
	step := float64(len(x)) / float64(n)
	for i := 0.0; int(i) < len(x); i += step {
		ox, oy = append(ox, x[int(i)]), append(oy, y[int(i)])
	}
	ox, oy = append(ox, x[len(x)-1]), append(oy, y[len(y)-1])
	return ox, oy
}

// turnsTable splits TTFT by conversation turn and shows the fleet's prefill work, for runs
// whose workload marks turns (the Mooncake trace).
func turnsTable(runs []RunData) (report.Table, bool) {
	t := report.Table{Title: "First turns vs follow-up turns (TTFT ms) and the fleet's prefill work",
		Columns: []string{"policy", "first p50", "p90", "p99", "follow-up p50", "p90", "p99", "prefix hit rate", "prompt Mtokens", "computed Mtokens"}}
	for _, r := range runs {
		s := r.Summary
		if s.FirstTurnTTFT == nil || s.FollowUpTTFT == nil {
			continue
		}
		a, b := s.FirstTurnTTFT, s.FollowUpTTFT
		t.Rows = append(t.Rows, []string{r.Policy, f1(a.P50), f1(a.P90), f1(a.P99), f1(b.P50), f1(b.P90), f1(b.P99),
			report.F(s.PrefixHitRate, 3), report.F(float64(s.PromptTokens)/1e6, 2), report.F(float64(s.ComputedPrefillTokens)/1e6, 2)})
	}
	return t, len(t.Rows) > 0
}

// answersCell lists the requests the EPP answered itself, by status ("503×12 429×3"; "0" for
// none).
func answersCell(byStatus map[string]int) string {
	keys := make([]string, 0, len(byStatus))
	for k := range byStatus {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s×%d", k, byStatus[k]))
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, " ")
}
