package simbench

import (
	"slices"
	"testing"
	"time"
)

// TestReversalGate plays the actuator's ticks (every 10 s) against the gate: at each tick the
// advised prefill target, and whether the fleet has reached the target it was last given
// (settled). It checks which moves are acted on and how often the acted-on target turns.
func TestReversalGate(t *testing.T) {
	type tick struct {
		advise     int  // advised prefill target
		settled    bool // the fleet is at its last target (nothing provisioning or draining)
		resolution int  // what one replica of the advice moves the split by
	}
	// run repeats the same advice for n ticks, the fleet settled from tick settleAt on
	// (counted from the run's start; -1: never).
	run := func(n, advise, settleAt int) []tick {
		out := make([]tick, n)
		for i := range out {
			out[i] = tick{advise: advise, settled: settleAt >= 0 && i >= settleAt}
		}
		return out
	}
	// coarse is run with advice whose one replica moves the split by res GPUs.
	coarse := func(n, advise, settleAt, res int) []tick {
		out := run(n, advise, settleAt)
		for i := range out {
			out[i].resolution = res
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
			ticks: slices.Concat(run(1, 36, -1), run(1, 40, -1), run(1, 44, -1)), final: 44},
		{name: "a reversal waits while the move's pods provision",
			ticks: slices.Concat(run(1, 40, -1), run(5, 30, -1)), final: 40},
		{name: "a reversal waits while the shrunk role drains, long after any fixed dwell",
			// moved at 0 s; the decode pods it took drain until 200 s
			ticks: slices.Concat(run(1, 40, -1), run(19, 30, -1), run(1, 30, 0)), final: 40},
		{name: "a reversal waits a window after the move is done",
			// settled at 60 s; the window (60 s) ends at 120 s
			ticks: slices.Concat(run(1, 40, -1), run(5, 40, -1), run(6, 30, 0)), final: 40},
		{name: "a reversal once the window has measured the new fleet",
			// settled at 60 s with the advice unchanged; it turns at 70 s, after the settle
			ticks: slices.Concat(run(1, 40, -1), run(5, 40, -1), run(1, 40, 0), run(6, 30, 0)), final: 30, maxTurns: 1, wantTurnsMin: 1},
		{name: "a reversal the advice asked for before the fleet settled waits for the advisor's hold",
			// advised back at 10 s, while the move provisions; settled at 60 s: the window ends at
			// 120 s, the hold (120 s) at 240 s
			ticks: slices.Concat(run(1, 40, -1), run(5, 30, -1), run(18, 30, 0)), final: 40},
		{name: "a reversal the advice held through the settle is acted on after the window and the hold",
			ticks: slices.Concat(run(1, 40, -1), run(5, 30, -1), run(19, 30, 0)), final: 30, maxTurns: 1, wantTurnsMin: 1},
		{name: "a move the same way as the last is not held back by advice from before the settle",
			ticks: slices.Concat(run(1, 40, -1), run(5, 30, -1), run(2, 30, 0), run(1, 44, 0)), final: 44},
		{name: "a move within one replica of coarse advice is rounding, not demand",
			ticks: coarse(3, 35, 1, 3), final: 32},
		{name: "a move beyond one replica of coarse advice is followed",
			ticks: coarse(3, 36, 1, 3), final: 36},
		{name: "a steady need rounding one way, then the other, never turns the fleet",
			// a need between two whole replicas, advised as one and then the other
			ticks: slices.Concat(coarse(12, 35, 0, 3), coarse(12, 29, 0, 3), coarse(12, 35, 0, 3)), final: 32},
		{name: "advice flapping every tick turns the fleet at most once per move, settle and window",
			flap: &struct{ a, b, n, settle int }{a: 40, b: 24, n: 60, settle: 6}, final: 40, maxTurns: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := reversalGate{band: 2, window: time.Minute, hold: 2 * time.Minute}
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
				if !g.allow(now, target, tk.advise, tk.resolution) {
					continue
				}
				d := 1
				if tk.advise < target {
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

func TestAdviceResolution(t *testing.T) {
	tests := []struct {
		budget, prefill, decode, want int
	}{
		{16, 3, 2, 2},   // 10 prefill GPUs (9.6); 4:2 gives 11, 2:2 and 3:3 give 8, 3:1 gives 12
		{16, 1, 1, 3},   // 8; 2:1 gives 11 (10.7), 1:2 gives 5
		{64, 20, 20, 1}, // 32; 21:20 gives 33 (32.8), 19:20 gives 31
		{64, 5, 35, 1},  // 8; 6:35 gives 9 (9.4), 4:35 gives 7 (6.6), 5:34 and 5:36 give 8
		{64, 1, 1, 11},  // 32; 2:1 gives 43, 1:2 gives 21
	}
	for _, tc := range tests {
		if got := adviceResolution(tc.budget, tc.prefill, tc.decode); got != tc.want {
			t.Errorf("adviceResolution(%d, %d, %d) = %d, want %d", tc.budget, tc.prefill, tc.decode, got, tc.want)
		}
	}
}
