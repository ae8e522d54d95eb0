package routing

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func fakeResults(recP99, lrP99, pdTPOT, combTPOT float64) *Results {
	az80, mixed := PhaseName(WorkloadAzure, 0.8), PhaseName(WorkloadMixed, 0.8)
	mk := func(ttft99, tpot99 float64) CellStats {
		return CellStats{Requests: 10, OK: 10, TTFT: Quantiles{P50: ttft99 / 2, P90: ttft99 / 1.5, P99: ttft99},
			TPOT: Quantiles{P50: tpot99 / 2, P90: tpot99, P99: tpot99}, E2E: Quantiles{P50: 1, P90: 2, P99: 3},
			Goodput: 0.9, TTFTs: []float64{ttft99 / 2, ttft99}}
	}
	pol := func(name string, c map[string]CellStats) PolicyResult {
		for _, p := range Policies {
			if p.Name == name {
				return PolicyResult{Policy: p, Cells: c, Requests: 20, LabCPUSeconds: 1}
			}
		}
		panic(name)
	}
	return &Results{
		TimeScale: 1, SLO: SLO{TTFT: time.Second, TPOT: 50 * time.Millisecond}, TraceSlice: [2]int{0, 10},
		FleetGPUs:     map[string]int{FleetPD: 4, FleetCombined: 4},
		AzureCapacity: Capacity{PrefillPodRPS: 25, DecodePodRPS: 30, CombinedPodRPS: 12, PDRPS: 50, CombinedRPS: 48},
		MixedCapacity: Capacity{PrefillPodRPS: 10, DecodePodRPS: 90, CombinedPodRPS: 8, PDRPS: 20, CombinedRPS: 32},
		Phases:        []Phase{{Name: mixed, Workload: WorkloadMixed, Load: 0.8}, {Name: az80, Workload: WorkloadAzure, Load: 0.8}},
		Policies: []PolicyResult{
			pol(PolicyLeastRequest, map[string]CellStats{az80: mk(lrP99, 20), mixed: mk(100, pdTPOT)}),
			pol(PolicyRecommended, map[string]CellStats{az80: mk(recP99, 20), mixed: mk(100, pdTPOT)}),
			pol(PolicyCombined, map[string]CellStats{az80: mk(900, 60), mixed: mk(100, combTPOT)}),
			{Policy: Policies[0], Error: "lab not healthy", Cells: map[string]CellStats{}},
		},
	}
}

func TestEvaluateGoals(t *testing.T) {
	tests := []struct {
		name                         string
		rec, lr, pdTPOT, combTPOT    float64
		wantTTFTMet, wantTPOTMet     bool
		wantTTFTValue, wantTPOTValue float64
	}{
		{"both met", 300, 400, 10, 25, true, true, 0.25, 2.5},
		{"exactly at the bounds", 320, 400, 10, 20, true, true, 0.2, 2},
		{"neither", 390, 400, 10, 15, false, false, 0.025, 1.5},
		{"recommended worse", 500, 400, 30, 15, false, false, -0.25, 0.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := EvaluateGoals(fakeResults(tt.rec, tt.lr, tt.pdTPOT, tt.combTPOT))
			if len(g) != 2 || g[0].Met != tt.wantTTFTMet || g[1].Met != tt.wantTPOTMet ||
				math.Abs(g[0].Value-tt.wantTTFTValue) > 1e-9 || math.Abs(g[1].Value-tt.wantTPOTValue) > 1e-9 {
				t.Fatalf("goals %+v", g)
			}
		})
	}
	// A run without the needed cells says so and does not claim the goal.
	r := fakeResults(300, 400, 10, 25)
	r.Policies = r.Policies[2:]
	for _, g := range EvaluateGoals(r) {
		if g.Met || !strings.HasPrefix(g.Measured, "not measured") {
			t.Errorf("goal without data: %+v", g)
		}
	}
}

func TestBuildReportWritesEverything(t *testing.T) {
	res := fakeResults(300, 400, 10, 25)
	res.Goals = EvaluateGoals(res)
	res.Started = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	dir := t.TempDir()
	rep := BuildReport(res)
	if !rep.Started.Equal(res.Started) {
		t.Fatalf("report start %s, want the run's %s", rep.Started, res.Started)
	}
	md, err := rep.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	for _, want := range []string{
		"| azure-conv@80% | recommended | 150 / 200 / 300 | 10.0 / 20.0 / 20.0 |",
		"| random | pd | config/bench/routing/random.yaml |",
		"failed: lab not healthy",
		"| recommended cuts p99 TTFT vs least-request (azure-conv, 80 % load) | ≥ 20 % | 25.0 % (p99 TTFT 300 ms vs 400 ms) | met |",
		"2.50× (p99 TPOT 25.0 ms combined vs 10.0 ms P/D) | met |",
		"| azure-conv | 25.0 | 30.0 | 12.0 | 50.0 | 48.0 |",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	for _, f := range []string{"routing-ttft-cdf-80.png", "routing-p99-ttft-vs-load.png", "routing-goodput-vs-load.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("plot %s: %v", f, err)
		}
	}
	var back struct {
		Data Results `json:"data"`
	}
	js, _ := os.ReadFile(filepath.Join(dir, "routing.json"))
	if err := json.Unmarshal(js, &back); err != nil || len(back.Data.Policies) != 4 || len(back.Data.Goals) != 2 {
		t.Fatalf("JSON data: %v, %+v", err, back.Data.Goals)
	}
}
