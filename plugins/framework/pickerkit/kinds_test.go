package pickerkit_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/framework/pickerkit"
	"github.com/pdgate/pdgate/plugins/pickers/maxscorepicker"
	"github.com/pdgate/pdgate/plugins/pickers/randompicker"
	"github.com/pdgate/pdgate/plugins/pickers/weightedrandompicker"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// The picker types built on the kit; each package tests its own pick, this file what they
// share. Each entry lists score sets that exercise its seeded draws (ties for max-score, the
// uniform fallback for weighted-random).
var kinds = []struct {
	kind   pickerkit.Kind
	scores [][]float64
}{
	{maxscorepicker.Kind, [][]float64{{5, 5, 5, 5, 5, 5, 1}}},
	{randompicker.Kind, [][]float64{{1, 2, 3, 4, 5, 6}}},
	{weightedrandompicker.Kind, [][]float64{{1, 2, 3, 4, 5, 6}, {0, 0, 0, 0}}},
}

// A picker's factory decodes through Build (TestBuild covers the parameters and the seed);
// here: it builds that type, and names it in errors.
func TestKindFactory(t *testing.T) {
	for _, k := range kinds {
		t.Run(k.kind.Type, func(t *testing.T) {
			pl, err := k.kind.Factory("x", json.RawMessage(`{"maxNumOfEndpoints": 3}`), nil)
			if err != nil {
				t.Fatal(err)
			}
			if p := pl.(*pickerkit.Picker); p.Max != 3 || p.TypedName() != (fwkplugin.TypedName{Type: k.kind.Type, Name: "x"}) {
				t.Fatalf("max %d name %v", p.Max, p.TypedName())
			}
			if _, err := k.kind.Factory("x", json.RawMessage(`{"max": 3}`), nil); err == nil || !strings.Contains(err.Error(), k.kind.Type+` "x"`) {
				t.Fatalf("unknown field: err %v, want one naming %s \"x\"", err, k.kind.Type)
			}
		})
	}
}

// A seeded picker makes the same sequence of picks whatever order the candidates come in, and
// another seed makes another.
func TestKindSeededIsReproducible(t *testing.T) {
	for _, k := range kinds {
		for _, scores := range k.scores {
			eps := eptest.Scored(scores...)
			run := func(seed uint64, order *rand.Rand) []string {
				p := k.kind.New("p", 2, pickerkit.NewRand(seed, true))
				var out []string
				for range 50 {
					out = append(out, eptest.Names(p.Pick(context.Background(), nil, eptest.Shuffled(eps, order)))...)
				}
				return out
			}
			a, b := run(42, rand.New(rand.NewPCG(1, 1))), run(42, rand.New(rand.NewPCG(2, 2)))
			if !slices.Equal(a, b) {
				t.Fatalf("%s, scores %v: seeded picks differ with the input order:\n%v\n%v", k.kind.Type, scores, a, b)
			}
			if c := run(43, rand.New(rand.NewPCG(1, 1))); slices.Equal(a, c) {
				t.Errorf("%s, scores %v: seeds 42 and 43 picked the same 100 endpoints", k.kind.Type, scores)
			}
		}
	}
}
