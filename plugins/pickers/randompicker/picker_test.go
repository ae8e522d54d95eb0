package randompicker

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
			p := New("p", tt.max, pickerkit.NewRand(3, true))
			counts := map[string]int{}
			for range n {
				got := eptest.Names(p.Pick(context.Background(), nil, eptest.Scored(tt.scores...)))
				if len(got) != tt.want {
					t.Fatalf("picked %v, want %d endpoints", got, tt.want)
				}
				for _, g := range got {
					counts[g]++
				}
			}
			want := float64(tt.want) / float64(len(tt.scores))
			for i := range tt.scores {
				got := float64(counts[fmt.Sprintf("pod%d", i)]) / n
				if got < want-0.02 || got > want+0.02 {
					t.Errorf("pod%d picked in %.3f of runs, want %.3f ± 0.02", i, got, want)
				}
			}
		})
	}
}

// A seeded picker makes the same sequence of picks whatever order the candidates come in.
func TestSeededIsReproducible(t *testing.T) {
	eps := eptest.Scored(1, 2, 3, 4, 5, 6)
	run := func(order *rand.Rand) []string {
		p := New("p", 2, pickerkit.NewRand(42, true))
		var out []string
		for range 50 {
			out = append(out, eptest.Names(p.Pick(context.Background(), nil, eptest.Shuffled(eps, order)))...)
		}
		return out
	}
	if a, b := run(rand.New(rand.NewPCG(1, 1))), run(rand.New(rand.NewPCG(2, 2))); !slices.Equal(a, b) {
		t.Fatalf("seeded picks differ with the input order:\n%v\n%v", a, b)
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
