package randompicker

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/framework/pickerkit"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// Scores are ignored: every candidate is picked with probability max/candidates.
func TestPick(t *testing.T) {
	const n = 20000
	tests := []struct {
		name   string
		max    int
		scores []float64
		want   int // endpoints per pick
	}{
		{name: "one of three", max: 1, scores: []float64{10, 20, 30}, want: 1},
		{name: "two of three", max: 2, scores: []float64{10, 20, 30}, want: 2},
		{name: "fewer candidates than max", max: 5, scores: []float64{10, 20}, want: 2},
		{name: "default on invalid max", max: -1, scores: []float64{1, 1, 1, 1}, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Kind.New("p", tt.max, pickerkit.NewRand(3, true))
			want := float64(tt.want) / float64(len(tt.scores))
			for i, got := range eptest.PickRates(t, p, tt.scores, n, tt.want) {
				if got < want-0.02 || got > want+0.02 {
					t.Errorf("pod%d picked in %.3f of runs, want %.3f ± 0.02", i, got, want)
				}
			}
		})
	}
}
