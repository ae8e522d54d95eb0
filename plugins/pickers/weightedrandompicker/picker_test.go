package weightedrandompicker

import (
	"context"
	"fmt"
	"testing"

	"github.com/pdgate/pdgate/plugins/framework/pickerkit"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// A-Res: a candidate's chance grows with its score; a zero score is never picked while a
// positive one exists; all zero: uniform. Frequencies are checked against the exact
// probabilities (single pick: score share) with a fixed seed, so the test cannot flake.
func TestPick(t *testing.T) {
	const n = 20000
	tests := []struct {
		name   string
		max    int
		scores []float64
		want   []float64 // share of picks per pod (of n × endpoints per pick)
	}{
		{name: "high weight dominates", max: 1, scores: []float64{10, 90}, want: []float64{0.1, 0.9}},
		{name: "equal weights uniform", max: 1, scores: []float64{100, 100, 100}, want: []float64{1. / 3, 1. / 3, 1. / 3}},
		{name: "zero weight excluded", max: 1, scores: []float64{30, 0}, want: []float64{1, 0}},
		{name: "multi-tier proportional", max: 1, scores: []float64{100, 90, 50, 30, 30}, want: []float64{0.3333, 0.3, 0.1667, 0.1, 0.1}},
		{name: "all zero uniform", max: 1, scores: []float64{0, 0, 0, 0}, want: []float64{0.25, 0.25, 0.25, 0.25}},
		{name: "max honoured, zero last", max: 2, scores: []float64{10, 10, 0}, want: []float64{0.5, 0.5, 0}},
		{name: "fewer candidates than max", max: 3, scores: []float64{5, 0}, want: []float64{0.5, 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Kind.New("p", tt.max, pickerkit.NewRand(5, true))
			counts := map[string]int{}
			total := 0
			for range n {
				got := eptest.Names(p.Pick(context.Background(), nil, eptest.Scored(tt.scores...)))
				if len(got) != min(tt.max, len(tt.scores)) {
					t.Fatalf("picked %v, want %d endpoints", got, min(tt.max, len(tt.scores)))
				}
				if len(got) > 0 && tt.want[0] == 1 && got[0] != "pod0" {
					t.Fatalf("picked %v, want pod0 first", got)
				}
				for _, g := range got {
					counts[g]++
					total++
				}
			}
			for i, w := range tt.want {
				got := float64(counts[fmt.Sprintf("pod%d", i)]) / float64(total)
				if got < w-0.02 || got > w+0.02 {
					t.Errorf("pod%d: share %.3f, want %.3f ± 0.02", i, got, w)
				}
			}
		})
	}
}
