package routing

import (
	"math"
	"testing"

	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// The derivation must agree with the cost model's closed forms where they are exact.
func TestPodThroughputMatchesTheCostModel(t *testing.T) {
	prof := costmodel.Default()
	prof.MaxBatch = 8
	prof.ChunkedPrefillTokens = 0
	// Prefill of 1000-token prompts, 8 per step (no chunking): one step computes 8 prompts
	// and emits their first tokens.
	jobs := []Job{{Prompt: 1000, Output: 50}}
	got, err := PodThroughput(prof, rolePrefill, jobs)
	if err != nil {
		t.Fatal(err)
	}
	// Each prompt costs at least its compute (no overhead shared) and at most a whole prefill
	// with its own step overhead plus one decode step of the batch.
	perPrompt := prof.PrefillTime(1000, 0).Seconds()
	upper := 1 / (perPrompt - prof.PrefillOverhead().Seconds())
	lower := 1 / (perPrompt + prof.DecodeStep(8, 8*1001).Seconds())
	if got < lower || got > upper {
		t.Fatalf("prefill throughput %.2f req/s outside [%.2f, %.2f]", got, lower, upper)
	}
	// Decode with 8 sequences of 100 output tokens each: about 8 requests per 100 steps.
	dec, err := PodThroughput(prof, roleDecode, []Job{{Prompt: 1000, Output: 100}})
	if err != nil {
		t.Fatal(err)
	}
	want := 8 / (100 * prof.DecodeStep(8, 8*1050).Seconds())
	if math.Abs(dec-want)/want > 0.1 {
		t.Fatalf("decode throughput %.2f req/s, want about %.2f", dec, want)
	}
}

func TestFleetCapacity(t *testing.T) {
	prof := costmodel.Default()
	prof.MaxBatch = 16
	jobs := []Job{{Prompt: 1200, Output: 200}, {Prompt: 300, Output: 40}, {Prompt: 4000, Output: 20}}
	c, err := FleetCapacity(prof, jobs, 2, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"P/D is the slower side", c.PDRPS, math.Min(2*c.PrefillPodRPS, 2*c.DecodePodRPS)},
		{"combined scales with pods", c.CombinedRPS, 4 * c.CombinedPodRPS},
	}
	for _, tt := range tests {
		if tt.got != tt.want || tt.got <= 0 {
			t.Errorf("%s: got %v, want %v (> 0)", tt.name, tt.got, tt.want)
		}
	}
	// A combined pod does a prefill pod's and a decode pod's work, so it is slower than either.
	if c.CombinedPodRPS >= c.PrefillPodRPS || c.CombinedPodRPS >= c.DecodePodRPS {
		t.Errorf("combined pod %.2f req/s not below prefill %.2f and decode %.2f", c.CombinedPodRPS, c.PrefillPodRPS, c.DecodePodRPS)
	}
}

func TestPodThroughputErrors(t *testing.T) {
	prof := costmodel.Default()
	tests := []struct {
		name string
		role string
		jobs []Job
	}{
		{"no jobs", rolePrefill, nil},
		{"unknown role", "encode", []Job{{Prompt: 10, Output: 1}}},
		{"nothing fits", roleCombined, []Job{{Prompt: prof.KVCapacityTokens + 1, Output: 1}}},
	}
	for _, tt := range tests {
		if _, err := PodThroughput(prof, tt.role, tt.jobs); err == nil {
			t.Errorf("%s: want an error", tt.name)
		}
	}
}
