package simbench

import (
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/internal/listgen"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// TestCPUOffloadTierServesWhatTheGPUEvicted: prompt A, then B, which evicts A's tail from a
// small GPU cache, then A again. Without a CPU tier the second A computes its evicted tail
// again; with one it loads it back (counted as hits loaded from CPU) and computes only its
// last token.
func TestCPUOffloadTierServesWhatTheGPUEvicted(t *testing.T) {
	a, b := strings.Repeat("abcd", 1200), strings.Repeat("wxyz", 1200) // 1,200 tokens each
	arrivals := func() Source {
		return listgen.New([]Arrival{promptArrival(0, a, 2), promptArrival(time.Second, b, 2), promptArrival(2*time.Second, a, 2)})
	}
	prof := func(cpuTokens int) *costmodel.Profile {
		p := costmodel.Default()
		p.KVCapacityTokens = 2000 // A and B do not both fit
		p.CPUOffload.CapacityTokens = cpuTokens
		return p
	}
	gpuOnly := run(t, Config{Profile: prof(0), Pods: FleetCombined(1, "m"), Model: "m", Source: arrivals()}).Summary
	tiered := run(t, Config{Profile: prof(8000), Pods: FleetCombined(1, "m"), Model: "m", Source: arrivals()}).Summary
	if gpuOnly.CPULoadedTokens != 0 {
		t.Fatalf("a GPU-only engine loaded %d tokens from CPU", gpuOnly.CPULoadedTokens)
	}
	if tiered.CPULoadedTokens <= 0 || tiered.ComputedPrefillTokens != gpuOnly.ComputedPrefillTokens-tiered.CPULoadedTokens {
		t.Fatalf("tiered: computed %d, loaded %d; GPU only computed %d: the tier must serve what the GPU evicted",
			tiered.ComputedPrefillTokens, tiered.CPULoadedTokens, gpuOnly.ComputedPrefillTokens)
	}
	if want := int64(3*1200 - 1199); tiered.ComputedPrefillTokens != want {
		t.Fatalf("tiered computed %d prompt tokens, want %d (A, B, and A's last token)", tiered.ComputedPrefillTokens, want)
	}
}
