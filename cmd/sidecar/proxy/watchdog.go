package proxy

import (
	"context"
	"sync"
	"time"
)

// Watchdog phases.
const (
	phaseFirst    = "first_response"
	phaseResponse = "response"
	phaseIdle     = "stream_idle"
)

func contextWithCancel(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithCancel(parent)
}

// watchdog bounds a decode leg: streaming answers must send a first body chunk within first
// (headers alone do not count: SGLang sends them before the first token) and then no gap
// longer than idle; non-streaming answers must finish within total. Zero disables a phase.
// On fire it cancels the leg and remembers the phase.
type watchdog struct {
	first, total, idle time.Duration
	stream             bool
	cancel             func()

	mu        sync.Mutex
	timer     *time.Timer
	phase     string
	deadline  time.Time
	lastChunk time.Time
	started   bool
	gotChunk  bool
	stopped   bool
	firedAt   string
}

func newWatchdog(first, total, idle time.Duration, stream bool, cancel func()) *watchdog {
	return &watchdog{first: first, total: total, idle: idle, stream: stream, cancel: cancel}
}

// start arms the first phase (decode sent, or concurrent prefill succeeded).
func (d *watchdog) start() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.started || d.stopped {
		return
	}
	d.started = true
	switch {
	case d.stream && !d.gotChunk && d.first > 0:
		d.arm(phaseFirst, time.Now().Add(d.first))
	case !d.stream && d.total > 0:
		d.arm(phaseResponse, time.Now().Add(d.total))
	}
}

// chunk records a body chunk from the engine.
func (d *watchdog) chunk() {
	if !d.stream {
		return
	}
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastChunk = now
	if d.gotChunk || d.stopped {
		return
	}
	d.gotChunk = true
	if d.idle > 0 {
		d.arm(phaseIdle, now.Add(d.idle))
	} else if d.timer != nil {
		d.timer.Stop()
		d.phase = ""
	}
}

// arm sets the single timer; callers hold mu. The idle phase keeps one timer and re-arms it
// from lastChunk on expiry instead of resetting it on every chunk.
func (d *watchdog) arm(phase string, deadline time.Time) {
	d.phase, d.deadline = phase, deadline
	if d.timer == nil {
		d.timer = time.AfterFunc(time.Until(deadline), d.expire)
		return
	}
	d.timer.Stop()
	d.timer.Reset(time.Until(deadline))
}

func (d *watchdog) expire() {
	d.mu.Lock()
	if d.stopped || d.firedAt != "" || d.phase == "" {
		d.mu.Unlock()
		return
	}
	now := time.Now()
	deadline := d.deadline
	if d.phase == phaseIdle {
		deadline = d.lastChunk.Add(d.idle)
	}
	if now.Before(deadline) {
		d.deadline = deadline
		d.timer.Reset(deadline.Sub(now))
		d.mu.Unlock()
		return
	}
	d.firedAt = d.phase
	d.mu.Unlock()
	d.cancel()
}

func (d *watchdog) fired() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.firedAt
}

func (d *watchdog) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
	}
}
