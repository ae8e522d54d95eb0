package proxy

import (
	"sync"
	"time"
)

// gate joins a concurrent prefill leg with its decode leg: whichever happens first wins
// between "decode started answering" (commit) and "prefill failed" (fail).
type gate struct {
	// resetAfterCommit: a prefill failure after the decode answer started still cuts the
	// decode stream (TRT-LLM generation_first, whose decode cannot finish without the context
	// phase). SGLang keeps the stream and only records the failure.
	resetAfterCommit bool
	succeeded        chan struct{}

	mu        sync.Mutex
	committed bool
	err       *legError
	cancel    func()
	done      bool
	start     time.Time
	end       time.Time
}

func newGate(resetAfterCommit bool) *gate {
	return &gate{resetAfterCommit: resetAfterCommit, succeeded: make(chan struct{}), start: time.Now()}
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

// succeed records a completed prefill.
func (g *gate) succeed() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return
	}
	g.done, g.end = true, time.Now()
	close(g.succeeded)
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
