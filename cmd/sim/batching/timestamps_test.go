package batching

import (
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// The timestamps the simulator's engine request metrics are built from, on the fake clock:
// a request is scheduled at the start of the first step that works on it, not at submission
// nor at admission into a batch whose chunked-prefill budget is spent.
func TestRequestTimestamps(t *testing.T) {
	p := costmodel.Default()
	prefill := p.PrefillTime(1000, 0)
	decode2 := p.DecodeStep(1, 1001) + p.DecodeStep(1, 1002)
	tests := []struct {
		name  string
		mut   func(*Config)
		reqs  []*Request
		check func(t *testing.T, firstStep time.Duration, pr map[string]Progress)
	}{
		{
			name: "max batch 1: the second waits for the first to finish",
			mut:  func(c *Config) { c.MaxBatch = 1 },
			reqs: []*Request{{ID: "a", PromptTokens: 1000, OutputTokens: 3}, {ID: "b", PromptTokens: 1000, OutputTokens: 3}},
			check: func(t *testing.T, _ time.Duration, pr map[string]Progress) {
				wantTimes(t, pr["a"], 0, prefill, prefill+decode2)
				aEnd := prefill + decode2
				wantTimes(t, pr["b"], aEnd, aEnd+prefill, aEnd+prefill+decode2)
			},
		},
		{
			name: "chunked prefill: admitted with no budget left is still waiting",
			mut:  func(c *Config) { c.ChunkedPrefillTokens = 512 },
			reqs: []*Request{{ID: "a", PromptTokens: 1000, OutputTokens: 1}, {ID: "b", PromptTokens: 1000, OutputTokens: 1}},
			check: func(t *testing.T, firstStep time.Duration, pr map[string]Progress) {
				if got := pr["a"].ScheduledAt.Sub(pr["a"].SubmittedAt); got != 0 {
					t.Errorf("a scheduled after %v", got)
				}
				if firstStep != p.PrefillOverhead()+p.PrefillSpan(0, 512) {
					t.Fatalf("first step %v is not a's first chunk alone", firstStep)
				}
				if got := pr["b"].ScheduledAt.Sub(pr["b"].SubmittedAt); got != firstStep {
					t.Errorf("b scheduled after %v, want after the first step %v", got, firstStep)
				}
			},
		},
		{
			name: "transferred KV: scheduled at once, the first decode step emits the first token",
			reqs: []*Request{{ID: "a", PromptTokens: 1000, CachedTokens: 1000, OutputTokens: 3}},
			check: func(t *testing.T, _ time.Duration, pr map[string]Progress) {
				first := p.DecodeStep(1, 1000)
				wantTimes(t, pr["a"], 0, first, first+p.DecodeStep(1, 1001)+p.DecodeStep(1, 1002))
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, clk, _ := newSched(t, tc.mut)
			start := clk.Now()
			for _, r := range tc.reqs {
				if err := s.Submit(r); err != nil {
					t.Fatal(err)
				}
			}
			var firstStep time.Duration
			runSteps(t, clk, func() {
				if firstStep == 0 {
					firstStep = clk.Now().Sub(start)
				}
			})
			pr := map[string]Progress{}
			for _, r := range tc.reqs {
				pr[r.ID] = r.Progress()
				if !pr[r.ID].Done || pr[r.ID].Err != nil || !pr[r.ID].SubmittedAt.Equal(start) {
					t.Fatalf("%s: %+v", r.ID, pr[r.ID])
				}
			}
			tc.check(t, firstStep, pr)
		})
	}
}

// wantTimes checks scheduled, first and last token as offsets from submission.
func wantTimes(t *testing.T, p Progress, sched, first, last time.Duration) {
	t.Helper()
	got := []time.Duration{p.ScheduledAt.Sub(p.SubmittedAt), p.FirstTokenAt.Sub(p.SubmittedAt), p.LastTokenAt.Sub(p.SubmittedAt)}
	if got[0] != sched || got[1] != first || got[2] != last {
		t.Errorf("scheduled/first/last at %v, want %v", got, []time.Duration{sched, first, last})
	}
}
