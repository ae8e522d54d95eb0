package simbench

import (
	"testing"
	"time"
)

// TestReversalGate plays the actuator's ticks (every 10 s) against the gate: at each tick the
// advised prefill target, and whether the fleet has reached the target it was last given
// (settled). It checks which moves are acted on and how often the acted-on target turns.
func TestReversalGate(t *testing.T) {
	type tick struct {
		advise  int  // advised prefill target
		settled bool // the fleet is at its last target (nothing provisioning or draining)
	}
	// run repeats the same advice for n ticks, the fleet settled from tick settleAt on
	// (counted from the run's start; -1: never).
	run := func(n, advise, settleAt int) []tick {
		out := make([]tick, n)
		for i := range out {
			out[i] = tick{advise, settleAt >= 0 && i >= settleAt}
		}
		return out
	}
	concat := func(parts ...[]tick) []tick {
		var out []tick
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	// flap alternates the advice between a and b every tick for n ticks; a move settles
	// settle ticks after it is acted on (the simulated fleet below tracks that).
	tests := []struct {
		name string
		// ticks: the advice and the fleet's state; when nil, flap drives them
		ticks        []tick
		flap         *struct{ a, b, n, settle int }
		final        int // prefill target after the last tick (starts at 32)
		maxTurns     int
		wantTurnsMin int
	}{
		{name: "a step is followed at once", ticks: run(3, 40, 1), final: 40},
		{name: "inside the band nothing moves", ticks: run(10, 33, 0), final: 32},
		{name: "further moves the same way are not held back while the first provisions",
			ticks: concat(run(1, 36, -1), run(1, 40, -1), run(1, 44, -1)), final: 44},
		{name: "a reversal waits while the move's pods provision",
			ticks: concat(run(1, 40, -1), run(5, 30, -1)), final: 40},
		{name: "a reversal waits while the shrunk role drains, long after any fixed dwell",
			// moved at 0 s; the decode pods it took drain until 200 s
			ticks: concat(run(1, 40, -1), run(19, 30, -1), run(1, 30, 0)), final: 40},
		{name: "a reversal waits a window after the move is done",
			// settled at 60 s; the window (60 s) ends at 120 s
			ticks: concat(run(1, 40, -1), run(5, 40, -1), run(6, 30, 0)), final: 40},
		{name: "a reversal once the window has measured the new fleet",
			ticks: concat(run(1, 40, -1), run(5, 40, -1), run(7, 30, 0)), final: 30, maxTurns: 1, wantTurnsMin: 1},
		{name: "advice flapping every tick turns the fleet at most once per move, settle and window",
			flap: &struct{ a, b, n, settle int }{a: 40, b: 24, n: 60, settle: 6}, final: 40, maxTurns: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := reversalGate{band: 2, window: time.Minute}
			t0 := time.Unix(0, 0)
			target, dir, turns := 32, 0, 0
			movedAt := -1
			n := len(tc.ticks)
			if tc.flap != nil {
				n = tc.flap.n
			}
			for i := range n {
				now := t0.Add(time.Duration(i) * 10 * time.Second)
				var tk tick
				if tc.flap != nil {
					tk.advise = tc.flap.a
					if i%2 == 1 {
						tk.advise = tc.flap.b
					}
					tk.settled = movedAt >= 0 && i-movedAt >= tc.flap.settle
				} else {
					tk = tc.ticks[i]
				}
				g.observe(now, tk.settled)
				delta := tk.advise - target
				if !g.allow(now, delta) {
					continue
				}
				d := 1
				if delta < 0 {
					d = -1
				}
				if dir != 0 && d != dir {
					turns++
				}
				dir, target, movedAt = d, tk.advise, i
			}
			if target != tc.final || turns > tc.maxTurns || turns < tc.wantTurnsMin {
				t.Fatalf("prefill target %d after %d turns, want %d after %d to %d turns", target, turns, tc.final, tc.wantTurnsMin, tc.maxTurns)
			}
		})
	}
}
