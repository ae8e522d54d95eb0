package pdratioadvisor

import (
	"slices"
	"testing"
	"time"
)

// TestStabilizer feeds raw estimates every 10 s (band 0.1, dwell 120 s) and checks what is
// published, and how often the published count changes direction.
func TestStabilizer(t *testing.T) {
	repeat := func(n int, v ...int) []int {
		var out []int
		for range n {
			out = append(out, v...)
		}
		return out
	}
	tests := []struct {
		name       string
		raw        []int
		final      int
		maxChanges int // direction changes, the first move included
	}{
		{name: "noise inside the band never moves", raw: repeat(60, 20, 21, 19, 22, 18), final: 20, maxChanges: 0},
		{name: "a step up is followed at once", raw: slices.Concat(repeat(6, 20), repeat(3, 40)), final: 40, maxChanges: 1},
		{name: "a step down waits a whole dwell", raw: slices.Concat(repeat(6, 40), repeat(11, 20)), final: 40, maxChanges: 0},
		{name: "a step down after the dwell", raw: slices.Concat(repeat(6, 40), repeat(14, 20)), final: 20, maxChanges: 1},
		{name: "no flap: alternating estimates stay at the high one", raw: repeat(60, 10, 16), final: 16, maxChanges: 1},
		{name: "no flap: a slow square wave changes direction at most once a dwell",
			raw: repeat(10, 10, 10, 10, 30, 30, 30), final: 30, maxChanges: 1},
		{name: "small counts move by one replica", raw: slices.Concat(repeat(3, 1), repeat(3, 2)), final: 2, maxChanges: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStabilizer(0.1, 120*time.Second)
			t0 := time.Unix(0, 0)
			prev, dir, changes := -1, 0, 0
			for i, raw := range tc.raw {
				got := s.update(t0.Add(time.Duration(i)*10*time.Second), raw)
				if prev >= 0 && got != prev {
					d := 1
					if got < prev {
						d = -1
					}
					if d != dir {
						changes++
						dir = d
					}
				}
				prev = got
			}
			if prev != tc.final || changes > tc.maxChanges {
				t.Fatalf("published %d after %d direction changes, want %d after at most %d", prev, changes, tc.final, tc.maxChanges)
			}
		})
	}
}

// TestStabilizerDwellBetweenDirections: a scale-up right after a scale-down waits the dwell.
func TestStabilizerDwellBetweenDirections(t *testing.T) {
	s := newStabilizer(0.1, 60*time.Second)
	t0 := time.Unix(0, 0)
	at := func(sec int, raw int) int { return s.update(t0.Add(time.Duration(sec)*time.Second), raw) }
	at(0, 20)
	if got := at(70, 10); got != 10 {
		t.Fatalf("scale-down after a dwell at 10: published %d", got)
	}
	if got := at(80, 30); got != 10 {
		t.Fatalf("scale-up 10 s after a scale-down: published %d, want 10 until the dwell ends", got)
	}
	if got := at(130, 30); got != 30 {
		t.Fatalf("scale-up after the dwell: published %d, want 30", got)
	}
}
