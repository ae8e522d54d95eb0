// Package batching is the simulator's engine core: a continuous-batching scheduler with a
// max batch, a KV capacity (queue, preempt or reject when full) and chunked prefill, timed by
// the cost model on an injected clock. It has no HTTP and no wall-clock reads of its own, so
// tests and virtual-time cluster simulations drive it with FakeClock.
package batching

import (
	"container/heap"
	"sync"
	"time"
)

// Clock is model time. AfterFunc runs f once d of model time has passed.
type Clock interface {
	Now() time.Time
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a pending AfterFunc.
type Timer interface {
	Stop() bool
}

// ScaledClock runs model time Scale times faster than the wall clock (Scale 1 = real time).
type ScaledClock struct {
	Scale float64
	start time.Time
}

// NewScaledClock starts a model clock at the current wall time.
func NewScaledClock(scale float64) *ScaledClock {
	if scale <= 0 {
		scale = 1
	}
	return &ScaledClock{Scale: scale, start: time.Now()}
}

// Now is the start plus the elapsed wall time times Scale.
func (c *ScaledClock) Now() time.Time {
	el := time.Since(c.start)
	return c.start.Add(time.Duration(float64(el) * c.Scale))
}

// AfterFunc waits d/Scale of wall time.
func (c *ScaledClock) AfterFunc(d time.Duration, f func()) Timer {
	return time.AfterFunc(c.Wall(d), f)
}

// Wall converts a model duration to wall time.
func (c *ScaledClock) Wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.Scale)
}

// FakeClock only moves when Advance is called; due callbacks run synchronously in Advance,
// in due order, so a test sees every effect of the elapsed time when Advance returns.
type FakeClock struct {
	mu     sync.Mutex
	now    time.Time
	seq    int
	timers fakeHeap
}

// NewFakeClock starts at a fixed instant.
func NewFakeClock() *FakeClock {
	return &FakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc registers f to run when the clock reaches now+d.
func (c *FakeClock) AfterFunc(d time.Duration, f func()) Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, at: c.now.Add(d), seq: c.seq, f: f}
	heap.Push(&c.timers, t)
	return t
}

// Advance moves the clock by d, running every callback that falls due on the way.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	end := c.now.Add(d)
	for {
		if len(c.timers) == 0 || c.timers[0].at.After(end) {
			break
		}
		t := heap.Pop(&c.timers).(*fakeTimer)
		if t.at.After(c.now) {
			c.now = t.at
		}
		c.mu.Unlock()
		t.f()
		c.mu.Lock()
	}
	c.now = end
	c.mu.Unlock()
}

// Pending is the number of timers not yet fired or stopped.
func (c *FakeClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// NextIn is the model time until the next timer fires (false when none is pending).
func (c *FakeClock) NextIn() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return 0, false
	}
	return c.timers[0].at.Sub(c.now), true
}

type fakeTimer struct {
	c     *FakeClock
	at    time.Time
	seq   int
	f     func()
	index int
}

func (t *fakeTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.index < 0 || t.index >= len(t.c.timers) || t.c.timers[t.index] != t {
		return false
	}
	heap.Remove(&t.c.timers, t.index)
	return true
}

type fakeHeap []*fakeTimer

func (h fakeHeap) Len() int { return len(h) }
func (h fakeHeap) Less(i, j int) bool {
	if h[i].at.Equal(h[j].at) {
		return h[i].seq < h[j].seq
	}
	return h[i].at.Before(h[j].at)
}
func (h fakeHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].index = i; h[j].index = j }
func (h *fakeHeap) Push(x any)   { t := x.(*fakeTimer); t.index = len(*h); *h = append(*h, t) }
func (h *fakeHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}
