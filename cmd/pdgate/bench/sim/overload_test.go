package simbench

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOverloadOptions(t *testing.T) {
	tests := []struct {
		name string
		edit func(*OverloadOptions)
		want string
	}{
		{name: "no seeds", edit: func(o *OverloadOptions) { o.Seeds = nil }, want: "--seeds"},
		{name: "no load", edit: func(o *OverloadOptions) { o.Load = 0 }, want: "--load"},
		{name: "headroom above 1", edit: func(o *OverloadOptions) { o.Headroom = 1.5 }, want: "--headroom"},
		{name: "combined shape", edit: func(o *OverloadOptions) { o.Shape = "combined" }, want: "--shape"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := OverloadDefaults()
			o.Root, o.Out, o.Stdout = "../../../..", t.TempDir(), io.Discard
			tc.edit(&o)
			if err := RunOverload(context.Background(), o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// TestOverloadComparesGateAndForecast runs a small burst: the gate (on the virtual clock, so it
// admits while the pool has room) admits requests that then miss the SLO; the forecast refuses
// more and its admitted requests miss less, on the same arrivals.
func TestOverloadComparesGateAndForecast(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	o := OverloadDefaults()
	o.Root, o.Out, o.Stdout = "../../../..", t.TempDir(), io.Discard
	o.Pods, o.Burst, o.Seeds, o.Parallel = 4, 4*time.Second, []int64{1}, 1
	if err := RunOverload(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(o.Out, "overload.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Data OverloadData `json:"data"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	runs := map[string]OverloadCell{}
	for _, r := range rep.Data.Runs {
		runs[r.Admission] = r.Phases[len(r.Phases)-1]
	}
	g, f := runs[AdmissionGate], runs[AdmissionForecast]
	if g.Sent == 0 || g.Sent != f.Sent {
		t.Fatalf("sent gate %d, forecast %d: want the same arrivals", g.Sent, f.Sent)
	}
	if g.Admitted == 0 {
		t.Fatal("the gate admitted nothing: its detector reads metrics' age on the wall clock")
	}
	if f.Admitted >= g.Admitted || f.MissPct >= g.MissPct {
		t.Fatalf("forecast admitted %d (missed %.1f %%), gate %d (%.1f %%): want fewer admitted, fewer missing; %+v", f.Admitted, f.MissPct, g.Admitted, g.MissPct, rep.Data.Runs)
	}
	for file, want := range map[string]bool{"gate-epp.yaml": false, "forecast-epp.yaml": true} {
		cfg, err := os.ReadFile(filepath.Join(o.Out, file))
		if err != nil || strings.Contains(string(cfg), "forecast-admitter") != want {
			t.Fatalf("%s: %v, want forecast-admitter listed: %v\n%s", file, err, want, cfg)
		}
	}
}

// TestOverloadVerdictPerPhase: the goal is judged in every phase; a run whose average is under
// it while one phase is over does not meet it.
func TestOverloadVerdictPerPhase(t *testing.T) {
	cell := func(phase string, miss, goodput float64) OverloadCell {
		return OverloadCell{Phase: phase, MissPct: miss, Goodput: goodput}
	}
	gate := []OverloadCell{cell("code", 80, 0.5), cell("reasoning", 8, 1.9), cell("all", 56, 1.2)}
	tests := []struct {
		name     string
		forecast []OverloadCell
		want     string
		met      bool
	}{
		{name: "every phase under 1 %", want: "at most 0.90 % in a phase (reasoning)", met: true,
			forecast: []OverloadCell{cell("code", 0.2, 2.3), cell("reasoning", 0.9, 2.0), cell("all", 0.5, 2.2)}},
		{name: "one phase over, the run's average under", want: "at most 1.40 % in a phase (reasoning)",
			forecast: []OverloadCell{cell("code", 0.1, 2.3), cell("reasoning", 1.4, 2.0), cell("all", 0.7, 2.2)}},
		{name: "goodput below the gate's", want: "goodput 0.700 vs gate 1.200",
			forecast: []OverloadCell{cell("code", 0.1, 0.4), cell("reasoning", 0.2, 1.0), cell("all", 0.1, 0.7)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := OverloadDefaults()
			d := &OverloadData{Options: o, PhaseRates: []float64{6, 2.8}, Runs: []OverloadRun{
				{Seed: 1, Admission: AdmissionGate, Phases: gate}, {Seed: 1, Admission: AdmissionForecast, Phases: tc.forecast}}}
			dir := t.TempDir()
			md, err := writeOverloadReport(dir, d, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(md)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(raw), tc.want) {
				t.Fatalf("report lacks %q:\n%s", tc.want, raw)
			}
			if verdict := "every seed): " + metWord(tc.met); !strings.Contains(string(raw), verdict) {
				t.Fatalf("report lacks %q:\n%s", verdict, raw)
			}
		})
	}
}
