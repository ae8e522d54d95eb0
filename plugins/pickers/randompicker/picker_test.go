package randompicker

import (
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pickerkit"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// Scores are ignored: every candidate is picked with probability max/candidates.
func TestPick(t *testing.T) {
	third, twoThirds := 1./3, 2./3
	eptest.CheckPickRates(t, 20000, func(max int) fwksched.Picker {
		return Kind.New("p", max, pickerkit.NewRand(3, true))
	}, []eptest.RateCase{
		{Name: "one of three", Max: 1, Scores: []float64{10, 20, 30}, Want: []float64{third, third, third}},
		{Name: "two of three", Max: 2, Scores: []float64{10, 20, 30}, Want: []float64{twoThirds, twoThirds, twoThirds}},
		{Name: "fewer candidates than max", Max: 5, Scores: []float64{10, 20}, Want: []float64{1, 1}},
		{Name: "default on invalid max", Max: -1, Scores: []float64{1, 1, 1, 1}, Want: []float64{0.25, 0.25, 0.25, 0.25}},
	})
}
