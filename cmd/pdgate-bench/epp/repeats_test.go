package epp

import (
	"math"
	"testing"
)

func TestRepeats(t *testing.T) {
	for _, tc := range []struct {
		name   string
		nets   []float64
		median int
		spread float64
		text   string
		cell   string
	}{
		{name: "one", nets: []float64{2}, median: 0, spread: 0, text: "", cell: "—"},
		{name: "odd", nets: []float64{3, 1, 2}, median: 2, spread: 1, text: "; 3 repeats 1.000-3.000, spread 100.0 %", cell: "100.0 % of 3"},
		{name: "even takes the lower middle", nets: []float64{4, 1, 2, 3}, median: 2, spread: 1.5, text: "; 4 repeats 1.000-4.000, spread 150.0 %", cell: "150.0 % of 4"},
		{name: "ties keep run order", nets: []float64{5, 5, 5}, median: 1, spread: 0, text: "; 3 repeats 5.000-5.000, spread 0.0 %", cell: "0.0 % of 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := medianRun(tc.nets); got != tc.median {
				t.Errorf("median index %d, want %d", got, tc.median)
			}
			if got := spread(tc.nets); math.Abs(got-tc.spread) > 1e-9 {
				t.Errorf("spread %v, want %v", got, tc.spread)
			}
			if got := spreadCell(tc.nets); got != tc.cell {
				t.Errorf("cell %q, want %q", got, tc.cell)
			}
			if got := spreadText(tc.nets); got != tc.text {
				t.Errorf("text %q, want %q", got, tc.text)
			}
		})
	}
}
