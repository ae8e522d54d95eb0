package batching

import (
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// firstRec also implements FirstTokenObserver.
type firstRec struct {
	rec
	clk   *FakeClock
	first map[string][]time.Time
}

func (o *firstRec) FirstToken(r *Request) { o.first[r.ID] = append(o.first[r.ID], o.clk.Now()) }

func TestFirstTokenObserverAndStepExtra(t *testing.T) {
	p := costmodel.Default()
	tests := []struct {
		name      string
		extra     time.Duration
		cached    int // CachedTokens = prompt: the KV was transferred, no prefill step
		wantFirst time.Duration
	}{
		{"prefill step emits the first token", 0, 0, p.PrefillTime(1000, 0)},
		{"step lag on the prefill step", 3 * time.Millisecond, 0, p.PrefillTime(1000, 0) + 3*time.Millisecond},
		{"transferred KV: the first decode step emits it", 0, 1000, p.DecodeStep(1, 1000)},
		{"transferred KV with step lag", time.Millisecond, 1000, p.DecodeStep(1, 1000) + time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := NewFakeClock()
			o := &firstRec{clk: clk, first: map[string][]time.Time{}}
			s, err := New(Config{Profile: p, Clock: clk, MaxBatch: 8, KVCapacityTokens: 100000, StepExtra: tc.extra, Observer: o})
			if err != nil {
				t.Fatal(err)
			}
			start := clk.Now()
			r := &Request{ID: "a", PromptTokens: 1000, CachedTokens: tc.cached, OutputTokens: 3}
			if err := s.Submit(r); err != nil {
				t.Fatal(err)
			}
			runSteps(t, clk, nil)
			if got := o.first["a"]; len(got) != 1 || got[0].Sub(start) != tc.wantFirst {
				t.Fatalf("first token at %v, want once at %v", got, tc.wantFirst)
			}
			if pr := r.Progress(); pr.FirstTokenAt.Sub(start) != tc.wantFirst || !pr.Done {
				t.Fatalf("progress %+v", pr)
			}
		})
	}
	if _, err := New(Config{Profile: p, Clock: NewFakeClock(), MaxBatch: 1, KVCapacityTokens: 10, StepExtra: -1}); err == nil {
		t.Fatal("negative StepExtra accepted")
	}
}
