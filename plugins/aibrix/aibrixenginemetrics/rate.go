package aibrixenginemetrics

import "time"

type rateHistory struct {
	finished, tokens counterWindow
	lastSeen         time.Time
}

type sample struct {
	at time.Time
	v  float64
}

// counterWindow turns successive counter readings into a per-second rate over rateWindow.
type counterWindow struct {
	samples []sample
}

// observe adds a reading and returns the rate between the oldest reading inside the window and
// this one. A counter that went down (engine restart) restarts the window. ok=false until two
// readings with distinct times exist.
func (w *counterWindow) observe(now time.Time, v float64) (float64, bool) {
	if n := len(w.samples); n > 0 && v < w.samples[n-1].v {
		w.samples = w.samples[:0]
	}
	w.samples = append(w.samples, sample{at: now, v: v})
	// Keep one reading at or before the window start so the rate spans the full window.
	cut := 0
	for i := range w.samples {
		if now.Sub(w.samples[i].at) >= rateWindow {
			cut = i
		}
	}
	w.samples = w.samples[cut:]
	first := w.samples[0]
	dt := now.Sub(first.at).Seconds()
	if dt <= 0 {
		return 0, false
	}
	return (v - first.v) / dt, true
}
