package pdratioadvisor

import (
	"time"
)

// windowBuckets is the number of slices the sliding window is kept in: the window slides by
// a thirtieth of its length.
const windowBuckets = 30

// bucket holds one slice of the window's sums.
type bucket struct {
	idx int64

	arrivals                  float64
	remotePrompt, localPrompt float64 // prompt tokens of arrivals with and without a prefill pod
	completions, outputTokens float64
	completedPrompt           float64 // prompt tokens of the completed requests

	prefillTokens, prefillBusy float64 // tokens whose prefill ended; busy pod-seconds
	transferSum, transfers     float64
	step                       fitSums
	maxBatch                   float64
}

// window is the sliding window of measurements, on whatever clock the events carry.
type window struct {
	width   time.Duration
	buckets [windowBuckets]bucket
	epoch   time.Time
	started bool
}

func newWindow(length time.Duration) *window {
	return &window{width: max(length/windowBuckets, time.Millisecond)}
}

func (w *window) index(now time.Time) int64 {
	if !w.started {
		w.epoch, w.started = now, true
	}
	return int64(now.Sub(w.epoch) / w.width)
}

// at is the bucket of now, emptied first if it last held an older slice.
func (w *window) at(now time.Time) *bucket {
	i := w.index(now)
	if i < 0 {
		i = 0 // an event stamped before the first one (a clock step): the oldest slice
	}
	b := &w.buckets[i%windowBuckets]
	if b.idx != i {
		*b = bucket{idx: i}
	}
	return b
}

// total sums the slices of the window ending at now, and returns the span they cover (the
// window, or less before it has filled).
func (w *window) total(now time.Time) (bucket, time.Duration) {
	var t bucket
	if !w.started {
		return t, 0
	}
	cur := w.index(now)
	for i := range w.buckets {
		b := &w.buckets[i]
		if b.idx > cur-windowBuckets && b.idx <= cur {
			t.arrivals += b.arrivals
			t.remotePrompt += b.remotePrompt
			t.localPrompt += b.localPrompt
			t.completions += b.completions
			t.outputTokens += b.outputTokens
			t.completedPrompt += b.completedPrompt
			t.prefillTokens += b.prefillTokens
			t.prefillBusy += b.prefillBusy
			t.transferSum += b.transferSum
			t.transfers += b.transfers
			t.step.merge(b.step)
			t.maxBatch = max(t.maxBatch, b.maxBatch)
		}
	}
	span := min(now.Sub(w.epoch), windowBuckets*w.width)
	return t, span
}

// observation turns the window's sums into the estimate's input.
func (w *window) observation(now time.Time, kvTokens int) Observation {
	t, span := w.total(now)
	o := Observation{Requests: int(t.completions), Arrivals: int(t.arrivals), KVTokens: kvTokens, MaxBatch: t.maxBatch, Step: t.step.fit()}
	sec := span.Seconds()
	if sec <= 0 {
		return o
	}
	o.ArrivalRate = t.arrivals / sec
	o.PromptRate, o.LocalPromptRate = t.remotePrompt/sec, t.localPrompt/sec
	if t.arrivals > 0 {
		o.MeanPrompt = (t.remotePrompt + t.localPrompt) / t.arrivals
	}
	if t.completions > 0 {
		o.MeanOutput = t.outputTokens / t.completions
		o.CompletedPrompt = t.completedPrompt / t.completions
		o.OutputRate = t.arrivals / sec * o.MeanOutput
	}
	if t.prefillBusy > 0 {
		o.PrefillRate = t.prefillTokens / t.prefillBusy
	}
	if t.transfers > 0 {
		o.Transfer = time.Duration(t.transferSum / t.transfers * float64(time.Second))
	}
	return o
}
