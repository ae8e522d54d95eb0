package maxscorepicker

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pdgate/pdgate/plugins/framework/pickerkit"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestPick(t *testing.T) {
	tests := []struct {
		name   string
		max    int
		scores []float64
		// want lists the acceptable picks, position by position: a set per position (ties)
		want [][]string
	}{
		{name: "single max", max: 1, scores: []float64{10, 25, 15}, want: [][]string{{"pod1"}}},
		{name: "default on invalid max", max: 0, scores: []float64{10, 25, 15}, want: [][]string{{"pod1"}}},
		{name: "top two by score", max: 2, scores: []float64{20, 25, 30}, want: [][]string{{"pod2"}, {"pod1"}}},
		{name: "fewer candidates than max", max: 4, scores: []float64{20, 25, 30}, want: [][]string{{"pod2"}, {"pod1"}, {"pod0"}}},
		{name: "ties broken among equals only", max: 1, scores: []float64{50, 50, 30, 50}, want: [][]string{{"pod0", "pod1", "pod3"}}},
		{name: "tie then lower", max: 3, scores: []float64{30, 25, 30}, want: [][]string{{"pod0", "pod2"}, {"pod0", "pod2"}, {"pod1"}}},
		{name: "no candidates", max: 1, scores: nil, want: [][]string{}},
	}
	order := rand.New(rand.NewPCG(1, 2))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := Kind.New("p", tt.max, pickerkit.NewRand(7, true))
			seen := map[string]bool{}
			for range 200 {
				got := eptest.Names(p.Pick(context.Background(), nil, eptest.Shuffled(eptest.Scored(tt.scores...), order)))
				if len(got) != len(tt.want) {
					t.Fatalf("picked %v, want %d endpoints", got, len(tt.want))
				}
				for i, n := range got {
					if !slices.Contains(tt.want[i], n) {
						t.Fatalf("position %d: %s, want one of %v", i, n, tt.want[i])
					}
					if i == 0 {
						seen[n] = true
					}
				}
			}
			if len(tt.want) > 0 && len(seen) != len(tt.want[0]) {
				t.Errorf("first pick over 200 runs took %v, want every one of %v (random tie-break)", seen, tt.want[0])
			}
		})
	}
}
