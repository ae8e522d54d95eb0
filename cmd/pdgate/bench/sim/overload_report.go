package simbench

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
)

// overloadGoal is the bar: fewer than this share (%) of the admitted requests miss
// their SLO under the forecast.
const overloadGoal = 1.0

// writeOverloadReport writes overload.md and overload.json.
func writeOverloadReport(dir string, d *OverloadData, started time.Time) (string, error) {
	o := d.Options
	rep := report.New("overload", "Admission under overload: saturation gate vs forecast-admitter (pdgate bench sim overload)")
	rep.Started = started.UTC()
	rep.Data = d
	var phases []string
	for i, p := range o.Phases {
		phases = append(phases, fmt.Sprintf("%s at %.3f req/s per GPU", p, d.PhaseRates[i]))
	}
	rep.Add(report.Section{Title: "How to read this",
		Text: fmt.Sprintf("Virtual-time fleet of %d simulated GPUs (%s, cost profile %s) routed by %s. Bursts of %v each, at %.1f× each phase's capacity estimate: %s. "+
			"Every request is sheddable (priority -1). **gate**: the config as it is (the EPP's legacy max(S_prefill, S_decode) saturation gate); "+
			"**forecast**: the same config with forecast-admitter (TTFT %v, TPOT %v, headroom %.2f, the engines' cost profile), which replaces the gate. "+
			"Admitted = served; **missed** = share of admitted requests with TTFT or TPOT over the SLO; **goodput** = requests served within the SLO per second of burst per GPU. "+
			"Both admissions run the same arrivals per seed.",
			o.Pods, o.Shape, d.Profile, o.Config, o.Burst, o.Load, strings.Join(phases, ", then "), o.SLO.TTFT, o.SLO.TPOT, o.Headroom)})
	cols := []string{"seed", "phase"}
	for _, a := range []string{AdmissionGate, AdmissionForecast} {
		cols = append(cols, a+" admitted / sent", a+" missed %", a+" goodput")
	}
	cols = append(cols, "goodput forecast / gate")
	t := report.Table{Title: "Per seed and phase", Columns: cols}
	bySeed := map[int64]map[string]OverloadRun{}
	for _, r := range d.Runs {
		if bySeed[r.Seed] == nil {
			bySeed[r.Seed] = map[string]OverloadRun{}
		}
		bySeed[r.Seed][r.Admission] = r
	}
	seeds := make([]int64, 0, len(bySeed))
	for s := range bySeed {
		seeds = append(seeds, s)
	}
	sort.Slice(seeds, func(i, j int) bool { return seeds[i] < seeds[j] })
	var verdict []string
	allMet := true
	for _, seed := range seeds {
		g, f := bySeed[seed][AdmissionGate], bySeed[seed][AdmissionForecast]
		if len(g.Phases) == 0 || len(f.Phases) != len(g.Phases) {
			allMet = false
			verdict = append(verdict, fmt.Sprintf("seed %d: a run failed", seed))
			continue
		}
		// the goal holds in each phase: a run's average hides a phase that misses
		worst := OverloadCell{}
		for i := range g.Phases {
			gc, fc := g.Phases[i], f.Phases[i]
			if fc.MissPct >= worst.MissPct {
				worst = fc
			}
			row := []string{fmt.Sprint(seed), gc.Phase}
			for _, c := range []OverloadCell{gc, fc} {
				row = append(row, fmt.Sprintf("%d / %d", c.Admitted, c.Sent), report.F(c.MissPct, 2), report.F(c.Goodput, 3))
			}
			ratio := 0.0
			if gc.Goodput > 0 {
				ratio = fc.Goodput / gc.Goodput
			}
			row = append(row, report.F(ratio, 3))
			t.Rows = append(t.Rows, row)
			if i == len(g.Phases)-1 {
				met := worst.MissPct < overloadGoal && fc.Goodput >= gc.Goodput
				allMet = allMet && met
				verdict = append(verdict, fmt.Sprintf("seed %d: forecast missed %.2f %% of admitted (gate %.2f %%), at most %.2f %% in a phase (%s), goodput %.3f vs gate %.3f: %s",
					seed, fc.MissPct, gc.MissPct, worst.MissPct, worst.Phase, fc.Goodput, gc.Goodput, metWord(met)))
			}
		}
	}
	verdict = append(verdict, fmt.Sprintf("goal (forecast: < %.0f %% of admitted miss the SLO in every phase, goodput not below the gate's, every seed): %s",
		overloadGoal, metWord(allMet)))
	rep.Add(report.Section{Title: "Results", Text: "- " + strings.Join(verdict, "\n- "), Tables: []report.Table{t}})
	return rep.Write(dir)
}
