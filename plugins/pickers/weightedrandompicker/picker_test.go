package weightedrandompicker

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/framework/pickerkit"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// A-Res: a candidate's chance grows with its score; a zero score is never picked while a
// positive one exists; all zero: uniform. Frequencies are checked against the exact
// probabilities (single pick: score share) with a fixed seed, so the test cannot flake; a
// certain pick (rate 0 or 1) must be exact.
func TestPick(t *testing.T) {
	const n = 20000
	tests := []struct {
		name   string
		max    int
		scores []float64
		want   []float64 // share of the n picks that choose each pod
	}{
		{name: "high weight dominates", max: 1, scores: []float64{10, 90}, want: []float64{0.1, 0.9}},
		{name: "equal weights uniform", max: 1, scores: []float64{100, 100, 100}, want: []float64{1. / 3, 1. / 3, 1. / 3}},
		{name: "zero weight excluded", max: 1, scores: []float64{30, 0}, want: []float64{1, 0}},
		{name: "multi-tier proportional", max: 1, scores: []float64{100, 90, 50, 30, 30}, want: []float64{0.3333, 0.3, 0.1667, 0.1, 0.1}},
		{name: "all zero uniform", max: 1, scores: []float64{0, 0, 0, 0}, want: []float64{0.25, 0.25, 0.25, 0.25}},
		{name: "max honoured, zero last", max: 2, scores: []float64{10, 10, 0}, want: []float64{1, 1, 0}},
		{name: "fewer candidates than max", max: 3, scores: []float64{5, 0}, want: []float64{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Kind.New("p", tt.max, pickerkit.NewRand(5, true))
			for i, got := range eptest.PickRates(t, p, tt.scores, n, min(tt.max, len(tt.scores))) {
				w, tol := tt.want[i], 0.02
				if w == 0 || w == 1 {
					tol = 0
				}
				if got < w-tol || got > w+tol {
					t.Errorf("pod%d: picked in %.4f of runs, want %.4f ± %.2f", i, got, w, tol)
				}
			}
		})
	}
}
