package proxy

import (
	"context"
	"sync"
	"time"
)

// gateGrace is how long past the prefill leg's own deadline a failed decode waits for the
// leg to record its outcome (the leg always records one when its context ends; the grace
// only keeps a lost wake-up from turning into a hang).
const gateGrace = time.Second

// gate joins a concurrent prefill leg with its decode leg: whichever happens first wins
// between "decode started answering" (commit) and "prefill failed" (fail).
type gate struct {
	// resetAfterCommit: a prefill failure after the decode answer started still cuts the
	// decode stream (TRT-LLM generation_first, whose decode cannot finish without the context
	// phase). SGLang keeps the stream and only records the failure.
	resetAfterCommit bool
	succeeded        chan struct{}
	// finished closes when the prefill leg's outcome is known (success or failure).
	finished chan struct{}

	mu        sync.Mutex
	committed bool
	err       *legError
	cancel    func()
	done      bool
	start     time.Time
	end       time.Time
	// expect is what the prefill's answer says it produced (the decode's answer is checked
	// against it).
	expect handoffExpect
}

func newGate(resetAfterCommit bool) *gate {
	return &gate{resetAfterCommit: resetAfterCommit, succeeded: make(chan struct{}), finished: make(chan struct{}), start: time.Now()}
}

// attach registers the decode leg's cancel; a failure recorded earlier cancels at once.
func (g *gate) attach(cancel func()) {
	g.mu.Lock()
	g.cancel = cancel
	failed := g.err != nil
	g.mu.Unlock()
	if failed {
		cancel()
	}
}

// succeed records a completed prefill and what its answer says it produced.
func (g *gate) succeed(e handoffExpect) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return
	}
	g.done, g.end, g.expect = true, time.Now(), e
	close(g.succeeded)
	close(g.finished)
}

// fail records a terminal prefill failure. It reports whether the client will be answered
// with the failure (the decode answer had not started).
func (g *gate) fail(lerr *legError) (beforeResponse bool) {
	g.mu.Lock()
	if g.done {
		g.mu.Unlock()
		return false
	}
	g.done, g.end = true, time.Now()
	close(g.finished)
	if g.committed && !g.resetAfterCommit {
		g.mu.Unlock()
		return false
	}
	g.err = lerr
	cancel, committed := g.cancel, g.committed
	g.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return !committed
}

// commit marks the decode answer as started unless the prefill already failed.
func (g *gate) commit() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		return false
	}
	g.committed = true
	return true
}

// await blocks until the prefill leg's outcome is known, ctx ends (the client left) or the
// leg's deadline (start + limit, plus gateGrace) passes. It reports whether the outcome is
// known. A decode that failed while the prefill is still out calls it before answering:
// with concurrent legs the decode's error is often only the consequence of a prefill
// failure that has not arrived yet (the KV pull failed), and the client must be told the
// cause.
func (g *gate) await(ctx context.Context, limit time.Duration) bool {
	select {
	case <-g.finished:
		return true
	default:
	}
	t := time.NewTimer(time.Until(g.start.Add(limit + gateGrace)))
	defer t.Stop()
	select {
	case <-g.finished:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// expectation is what a completed prefill produced (zero while unknown: nothing to check).
func (g *gate) expectation() handoffExpect {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.expect
}

func (g *gate) failure() *legError {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.err
}

// outcome is the prefill outcome at the time decode answers. A decode that produced output
// had its KV delivered, so a prefill response still in flight counts as ok.
func (g *gate) outcome() (string, time.Duration, time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.done {
		return outcomeOK, time.Since(g.start), time.Time{}
	}
	return outcomeOK, g.end.Sub(g.start), g.end
}
