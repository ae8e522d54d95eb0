package maxscorepicker

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

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
			p := New("p", tt.max, pickerkit.NewRand(7, true))
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

// A seeded picker makes the same sequence of picks whatever order the candidates come in.
func TestSeededIsReproducible(t *testing.T) {
	eps := eptest.Scored(5, 5, 5, 5, 5, 5, 1)
	run := func(order *rand.Rand) []string {
		p := New("p", 2, pickerkit.NewRand(42, true))
		var out []string
		for range 50 {
			out = append(out, eptest.Names(p.Pick(context.Background(), nil, eptest.Shuffled(eps, order)))...)
		}
		return out
	}
	a, b := run(rand.New(rand.NewPCG(1, 1))), run(rand.New(rand.NewPCG(2, 2)))
	if !slices.Equal(a, b) {
		t.Fatalf("seeded picks differ with the input order:\n%v\n%v", a, b)
	}
	other := New("p", 2, pickerkit.NewRand(43, true))
	var c []string
	for range 50 {
		c = append(c, eptest.Names(other.Pick(context.Background(), nil, slices.Clone(eps)))...)
	}
	if slices.Equal(a, c) {
		t.Error("seeds 42 and 43 picked the same 100 endpoints")
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
