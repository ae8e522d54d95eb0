package weightedrandompicker

import (
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pickerkit"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// A-Res: a candidate's chance grows with its score; a zero score is never picked while a
// positive one exists; all zero: uniform. Frequencies are checked against the exact
// probabilities (single pick: score share) with a fixed seed, so the test cannot flake; a
// certain pick (rate 0 or 1) must be exact.
func TestPick(t *testing.T) {
	eptest.CheckPickRates(t, 20000, func(max int) fwksched.Picker {
		return Kind.New("p", max, pickerkit.NewRand(5, true))
	}, []eptest.RateCase{
		{Name: "high weight dominates", Max: 1, Scores: []float64{10, 90}, Want: []float64{0.1, 0.9}},
		{Name: "equal weights uniform", Max: 1, Scores: []float64{100, 100, 100}, Want: []float64{1. / 3, 1. / 3, 1. / 3}},
		{Name: "zero weight excluded", Max: 1, Scores: []float64{30, 0}, Want: []float64{1, 0}},
		{Name: "multi-tier proportional", Max: 1, Scores: []float64{100, 90, 50, 30, 30}, Want: []float64{0.3333, 0.3, 0.1667, 0.1, 0.1}},
		{Name: "all zero uniform", Max: 1, Scores: []float64{0, 0, 0, 0}, Want: []float64{0.25, 0.25, 0.25, 0.25}},
		{Name: "max honoured, zero last", Max: 2, Scores: []float64{10, 10, 0}, Want: []float64{1, 1, 0}},
		{Name: "fewer candidates than max", Max: 3, Scores: []float64{5, 0}, Want: []float64{1, 1}},
	})
}
