package batching

import (
	"errors"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

type rec struct{ prefills, finished, preempted int }

func (o *rec) PrefillDone(*Request, int, time.Duration) { o.prefills++ }
func (o *rec) Finished(*Request)                        { o.finished++ }
func (o *rec) Preempted(*Request)                       { o.preempted++ }

func newSched(t *testing.T, mut func(*Config)) (*Scheduler, *FakeClock, *rec) {
	t.Helper()
	clk := NewFakeClock()
	o := &rec{}
	cfg := Config{Profile: costmodel.Default(), Clock: clk, MaxBatch: 8, KVCapacityTokens: 100000, Policy: PolicyQueue, Observer: o}
	if mut != nil {
		mut(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, clk, o
}

// runSteps advances the fake clock one timer at a time, calling each after every step.
func runSteps(t *testing.T, clk *FakeClock, each func()) {
	t.Helper()
	for i := 0; i < 100000; i++ {
		d, ok := clk.NextIn()
		if !ok {
			return
		}
		clk.Advance(d)
		if each != nil {
			each()
		}
	}
	t.Fatal("scheduler did not go idle")
}

func TestSingleRequestTimeline(t *testing.T) {
	s, clk, o := newSched(t, nil)
	p := costmodel.Default()
	r := &Request{ID: "a", PromptTokens: 4096, OutputTokens: 4}
	if err := s.Submit(r); err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	runSteps(t, clk, nil)
	pr := r.Progress()
	if !pr.Done || pr.Err != nil || pr.Generated != 4 {
		t.Fatalf("progress %+v", pr)
	}
	if got, want := pr.FirstTokenAt.Sub(start), p.PrefillTime(4096, 0); got != want {
		t.Fatalf("TTFT %v, want the profile's 4k prefill %v", got, want)
	}
	want := p.PrefillTime(4096, 0) + p.DecodeStep(1, 4097) + p.DecodeStep(1, 4098) + p.DecodeStep(1, 4099)
	if got := pr.DoneAt.Sub(start); got != want {
		t.Fatalf("e2e %v, want %v", got, want)
	}
	if o.prefills != 1 || o.finished != 1 {
		t.Fatalf("observer %+v", o)
	}
	if st := s.Stats(); st.Running != 0 || st.KVUsedTokens != 0 || st.PromptTokens != 4096 || st.GeneratedTokens != 4 {
		t.Fatalf("stats after drain %+v", st)
	}
}

func TestCachedTokensSkipPrefill(t *testing.T) {
	s, clk, _ := newSched(t, nil)
	p := costmodel.Default()
	r := &Request{PromptTokens: 4096, CachedTokens: 4000, OutputTokens: 1}
	_ = s.Submit(r)
	start := clk.Now()
	runSteps(t, clk, nil)
	if got, want := r.Progress().FirstTokenAt.Sub(start), p.PrefillTime(4096, 4000); got != want {
		t.Fatalf("TTFT %v, want %v", got, want)
	}
	// a fully transferred KV goes straight to decode
	r2 := &Request{PromptTokens: 4096, CachedTokens: 4096, OutputTokens: 2}
	_ = s.Submit(r2)
	start = clk.Now()
	runSteps(t, clk, nil)
	if got, want := r2.Progress().FirstTokenAt.Sub(start), p.DecodeStep(1, 4096); got != want {
		t.Fatalf("TTFT with transferred KV %v, want one decode step %v", got, want)
	}
}

func TestMaxBatchAndKVQueueing(t *testing.T) {
	tests := []struct {
		name                 string
		maxBatch, capacity   int
		wantRunning, wantWai int
	}{
		{"max batch holds the third", 2, 100000, 2, 1},
		{"KV holds the second and third", 8, 700, 1, 2},
	}
	for _, tc := range tests {
		s, clk, _ := newSched(t, func(c *Config) { c.MaxBatch, c.KVCapacityTokens = tc.maxBatch, tc.capacity })
		reqs := []*Request{{PromptTokens: 500, OutputTokens: 100}, {PromptTokens: 500, OutputTokens: 100}, {PromptTokens: 500, OutputTokens: 100}}
		for _, r := range reqs {
			if err := s.Submit(r); err != nil {
				t.Fatal(err)
			}
		}
		// admission happens at step boundaries, as in an engine's scheduler loop
		d, _ := clk.NextIn()
		clk.Advance(d)
		if st := s.Stats(); st.Running != tc.wantRunning || st.Waiting != tc.wantWai {
			t.Errorf("%s: running %d waiting %d", tc.name, st.Running, st.Waiting)
		}
		runSteps(t, clk, nil)
		for i, r := range reqs {
			if pr := r.Progress(); !pr.Done || pr.Err != nil || pr.Generated != 100 {
				t.Errorf("%s: request %d %+v", tc.name, i, pr)
			}
		}
		if !reqs[2].Progress().FirstTokenAt.After(reqs[0].Progress().FirstTokenAt) {
			t.Errorf("%s: queued request did not wait", tc.name)
		}
	}
}

func TestRejectAndTooLarge(t *testing.T) {
	s, _, _ := newSched(t, func(c *Config) { c.KVCapacityTokens, c.Policy = 1000, PolicyReject })
	if err := s.Submit(&Request{PromptTokens: 600, OutputTokens: 100}); err != nil {
		t.Fatal(err)
	}
	if err := s.Submit(&Request{PromptTokens: 600, OutputTokens: 100}); !errors.Is(err, ErrKVFull) {
		t.Fatalf("want ErrKVFull, got %v", err)
	}
	if err := s.Submit(&Request{PromptTokens: 1000, OutputTokens: 1}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("want ErrTooLarge, got %v", err)
	}
}

func TestPreemptionRecomputes(t *testing.T) {
	s, clk, o := newSched(t, func(c *Config) { c.KVCapacityTokens, c.Policy = 1100, PolicyPreempt })
	a := &Request{ID: "a", PromptTokens: 500, OutputTokens: 100}
	b := &Request{ID: "b", PromptTokens: 500, OutputTokens: 100}
	_ = s.Submit(a)
	_ = s.Submit(b)
	runSteps(t, clk, func() {
		if st := s.Stats(); st.KVUsedTokens > 1100 {
			t.Fatalf("KV over capacity: %+v", st)
		}
	})
	if o.preempted == 0 || s.Stats().Preemptions == 0 {
		t.Fatal("no preemption although both cannot finish together")
	}
	for _, r := range []*Request{a, b} {
		if pr := r.Progress(); !pr.Done || pr.Err != nil || pr.Generated != 100 {
			t.Fatalf("%s: %+v", r.ID, pr)
		}
	}
	if b.Progress().Preemptions == 0 {
		t.Fatal("the newest request should be the one preempted")
	}
}

// A prefill chunk on a combined server delays the decode steps of the running sequences.
func TestChunkedPrefillInterferenceShowsInTPOT(t *testing.T) {
	p := costmodel.Default()
	gaps := func(withPrefill bool) []time.Duration {
		s, clk, _ := newSched(t, func(c *Config) { c.ChunkedPrefillTokens = 2048 })
		a := &Request{ID: "a", PromptTokens: 100, OutputTokens: 12}
		_ = s.Submit(a)
		clk.Advance(p.PrefillTime(100, 0)) // a's prefill step: first token
		if withPrefill {
			_ = s.Submit(&Request{ID: "b", PromptTokens: 8192, OutputTokens: 8})
		}
		var out []time.Duration
		last, lastGen := clk.Now(), a.Progress().Generated
		runSteps(t, clk, func() {
			if g := a.Progress().Generated; g != lastGen {
				out = append(out, clk.Now().Sub(last))
				last, lastGen = clk.Now(), g
			}
		})
		return out
	}
	alone, mixed := gaps(false), gaps(true)
	if len(alone) != 11 || len(mixed) != 11 {
		t.Fatalf("token counts %d %d", len(alone), len(mixed))
	}
	// b was submitted while a's first decode step was already planned, so b's four 2048-token
	// chunks ride on a's 2nd..5th decode steps.
	for i := 1; i <= 4; i++ {
		chunk := p.PrefillOverhead() + p.PrefillSpan((i-1)*2048, i*2048)
		if got, want := mixed[i]-alone[i], chunk; got != want {
			t.Errorf("decode step %d slowed by %v, want the chunk time %v", i, got, want)
		}
	}
	if mixed[6] <= alone[6] {
		t.Errorf("after b's prefill the batch of two should still be slower: %v vs %v", mixed[6], alone[6])
	}
}

func TestCancelReleasesKV(t *testing.T) {
	s, clk, _ := newSched(t, func(c *Config) { c.KVCapacityTokens = 1000 })
	a := &Request{PromptTokens: 500, OutputTokens: 400}
	b := &Request{PromptTokens: 500, OutputTokens: 400}
	_ = s.Submit(a)
	_ = s.Submit(b)
	b.Cancel() // waiting: removed at once
	if pr := b.Progress(); !pr.Done || !errors.Is(pr.Err, ErrCancelled) {
		t.Fatalf("waiting cancel: %+v", pr)
	}
	d, _ := clk.NextIn()
	clk.Advance(d)
	a.Cancel() // running: released at the end of the step
	runSteps(t, clk, nil)
	if pr := a.Progress(); !errors.Is(pr.Err, ErrCancelled) || pr.Generated >= 400 {
		t.Fatalf("running cancel: %+v", pr)
	}
	if st := s.Stats(); st.Running != 0 || st.Waiting != 0 || s.reserved != 0 {
		t.Fatalf("KV not released: %+v reserved %d", st, s.reserved)
	}
}

func TestConfigValidation(t *testing.T) {
	good := Config{Profile: costmodel.Default(), Clock: NewFakeClock(), MaxBatch: 1, KVCapacityTokens: 1}
	tests := []func(*Config){
		func(c *Config) { c.Profile = nil },
		func(c *Config) { c.Clock = nil },
		func(c *Config) { c.MaxBatch = 0 },
		func(c *Config) { c.KVCapacityTokens = 0 },
		func(c *Config) { c.ChunkedPrefillTokens = -1 },
		func(c *Config) { c.Policy = "drop" },
	}
	for i, mut := range tests {
		c := good
		mut(&c)
		if _, err := New(c); err == nil {
			t.Errorf("case %d: invalid config accepted", i)
		}
	}
	if _, err := New(good); err != nil {
		t.Fatal(err)
	}
}
