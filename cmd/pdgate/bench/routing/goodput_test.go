package routing

import (
	"math"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
	"github.com/pdgate/pdgate/cmd/pdgate/loadgen"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

func TestAttainmentsAndGoodputPerGPU(t *testing.T) {
	slos := []report.SLO{{Name: "tight", TTFT: 100 * time.Millisecond, TPOT: 10 * time.Millisecond},
		{Name: "loose", TTFT: time.Second, TPOT: 50 * time.Millisecond}}
	// wall ms; time scale 0.5 halves them into model time
	s := func(kind string, ok bool, ttft, tpot float64) loadgen.Sample {
		return loadgen.Sample{Kind: kind, OK: ok, Tokens: 10, TTFTMS: ttft, TPOTMS: tpot}
	}
	samples := []loadgen.Sample{
		s("azure-conv@50%/azure-conv", true, 100, 10), // model 50 / 5: both
		s("azure-conv@50%/azure-conv", true, 400, 10), // model 200 / 5: loose only
		s("azure-conv@100%/azure-conv", true, 400, 30),
		s("azure-conv@100%/azure-conv", false, 0, 0), // failure: a miss
		s("other@50%/chat", true, 1, 1),              // another phase: not counted
	}
	a50 := attainments(samples, "azure-conv@50%", 0.5, slos)
	a100 := attainments(samples, "azure-conv@100%", 0.5, slos)
	if a50["tight"] != 0.5 || a50["loose"] != 1 || a100["tight"] != 0 || a100["loose"] != 0.5 {
		t.Fatalf("attainments: 50 %% %v, 100 %% %v", a50, a100)
	}
	res := &Results{SLOs: slos, FleetGPUs: map[string]int{FleetPD: 4},
		Phases: []Phase{{Name: "azure-conv@50%", Workload: WorkloadAzure, RateRPS: 20}, {Name: "azure-conv@100%", Workload: WorkloadAzure, RateRPS: 40}}}
	pr := PolicyResult{Policy: Policy{Name: "p", Fleet: FleetPD}, Cells: map[string]CellStats{
		"azure-conv@50%":  {Requests: 2, Attainment: a50},
		"azure-conv@100%": {Requests: 2, Attainment: a100},
	}}
	g := GoodputPerGPU(res, pr)
	// tight: 0.5 at 5 req/s/GPU already below 90 %; loose: 1.0 at 5, 0.5 at 10 → 5 + 0.2 × 5 = 6
	if g["tight"].Bound != "<" || g["tight"].Value() != 0 {
		t.Errorf("tight: %+v", g["tight"])
	}
	if g["loose"].Bound != "" || math.Abs(g["loose"].Rate-6) > 1e-9 {
		t.Errorf("loose: %+v", g["loose"])
	}
}

func TestDeriveSLOs(t *testing.T) {
	p := &costmodel.Profile{ChunkedPrefillTokens: 2048}
	p.Prefill.OverheadMs, p.Prefill.LinearMsPerToken, p.Decode.BaseMs = 5, 0.01, 6
	got := DeriveSLOs(p, 1000, 200) // prefill 15 ms, step 6 ms
	if len(got) != 2 || got[0].TTFT != 80*time.Millisecond || got[0].TPOT != 9*time.Millisecond ||
		got[1].TTFT != 380*time.Millisecond || got[1].TPOT != 42*time.Millisecond {
		t.Fatalf("DeriveSLOs = %+v", got)
	}
	if m, o := jobMedians([]Job{{Prompt: 3, Output: 1}, {Prompt: 1, Output: 3}, {Prompt: 2, Output: 2}}); m != 2 || o != 2 {
		t.Errorf("jobMedians = %v, %v", m, o)
	}
}
