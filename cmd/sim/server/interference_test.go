package server

import (
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/sim/batching"
)

// On a combined server a long prefill that arrives while a request decodes stretches that
// request's time per output token (the vllm:time_per_output_token_seconds it reports).
func TestInterferenceVisibleInTPOT(t *testing.T) {
	tpot := func(withPrefill bool) float64 {
		clk := batching.NewFakeClock()
		in := startSim(t, clk, Options{})
		url := "http://" + in.Addr() + "/v1/completions"
		waitFor := func(n int) {
			for i := 0; ; i++ {
				if st := in.sched.Stats(); st.Running+st.Waiting+st.Finished == n {
					return
				}
				if i > 50000 {
					t.Fatal("request never reached the scheduler")
				}
				waitABit()
			}
		}
		done := make(chan result, 2)
		go func() { done <- post(t, url, map[string]any{"prompt": "decode me", "max_tokens": 40}, nil) }()
		waitFor(1)
		d, _ := clk.NextIn()
		clk.Advance(d) // A's prefill: A now decodes
		if withPrefill {
			go func() {
				done <- post(t, url, map[string]any{"prompt": strings.Repeat("long prompt ", 2700), "max_tokens": 1}, nil)
			}()
			waitFor(2)
		}
		for i := 0; i < 100000; i++ {
			d, ok := clk.NextIn()
			if !ok {
				break
			}
			clk.Advance(d)
		}
		for i := 0; i < 1+map[bool]int{true: 1}[withPrefill]; i++ {
			if r := <-done; r.status != 200 {
				t.Fatalf("%d %s", r.status, r.raw)
			}
		}
		return histSum(t, in, "vllm:time_per_output_token_seconds")
	}
	alone, mixed := tpot(false), tpot(true)
	if mixed <= alone*1.2 {
		t.Fatalf("TPOT with a co-scheduled 8k prefill %.4f s should clearly exceed TPOT alone %.4f s", mixed, alone)
	}
	t.Logf("TPOT alone %.2f ms, with an 8k-token prefill on the same server %.2f ms", alone*1e3, mixed*1e3)
}
