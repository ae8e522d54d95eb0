package weightedrandompicker

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

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
			p := New("p", tt.max, pickerkit.NewRand(5, true))
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

// A seeded picker makes the same sequence of picks whatever order the candidates come in.
func TestSeededIsReproducible(t *testing.T) {
	for _, scores := range [][]float64{{1, 2, 3, 4, 5, 6}, {0, 0, 0, 0}} {
		eps := eptest.Scored(scores...)
		run := func(order *rand.Rand) []string {
			p := New("p", 2, pickerkit.NewRand(42, true))
			var out []string
			for range 50 {
				out = append(out, eptest.Names(p.Pick(context.Background(), nil, eptest.Shuffled(eps, order)))...)
			}
			return out
		}
		if a, b := run(rand.New(rand.NewPCG(1, 1))), run(rand.New(rand.NewPCG(2, 2))); !slices.Equal(a, b) {
			t.Fatalf("scores %v: seeded picks differ with the input order:\n%v\n%v", scores, a, b)
		}
	}
}

// The factory decodes through pickerkit.Build (its table test covers the parameters and the
// seed); here: it builds this type, and names it in errors.
func TestFactory(t *testing.T) {
	pl, err := Factory("x", json.RawMessage(`{"maxNumOfEndpoints": 3}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := pl.(*Picker); p.Max != 3 || p.TypedName() != (fwkplugin.TypedName{Type: Type, Name: "x"}) {
		t.Fatalf("max %d name %v", p.Max, p.TypedName())
	}
	if _, err := Factory("x", json.RawMessage(`{"max": 3}`), nil); err == nil || !strings.Contains(err.Error(), Type+` "x"`) {
		t.Fatalf("unknown field: err %v, want one naming %s \"x\"", err, Type)
	}
}
