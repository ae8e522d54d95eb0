package eptest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// cyclePicker picks `per` endpoints starting at a position that advances by one each pick, so
// every rate is known exactly.
type cyclePicker struct {
	per, next int
}

func (c *cyclePicker) TypedName() fwkplugin.TypedName { return fwkplugin.TypedName{Type: "cycle"} }

func (c *cyclePicker) Pick(_ context.Context, _ *fwksched.CycleState, eps []*fwksched.ScoredEndpoint) *fwksched.ProfileRunResult {
	out := &fwksched.ProfileRunResult{}
	for i := range c.per {
		out.TargetEndpoints = append(out.TargetEndpoints, eps[(c.next+i)%len(eps)].Endpoint)
	}
	c.next++
	return out
}

// fatalTB records a Fatalf instead of ending the real test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func TestPickRates(t *testing.T) {
	// Four pods, two per pick, four picks starting at pod0..pod3: each pod is in two of them.
	got := PickRates(t, &cyclePicker{per: 2}, []float64{1, 1, 1, 1}, 4, 2)
	if want := []float64{0.5, 0.5, 0.5, 0.5}; !slices.Equal(got, want) {
		t.Fatalf("rates %v, want %v", got, want)
	}
	got = PickRates(t, &cyclePicker{per: 1}, []float64{1, 1, 1}, 6, 1)
	if want := []float64{2. / 6, 2. / 6, 2. / 6}; !slices.Equal(got, want) {
		t.Fatalf("rates %v, want %v", got, want)
	}

	// A pick of the wrong size fails the test.
	tb := &fatalTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(tb) {
				panic(r)
			}
		}()
		PickRates(tb, &cyclePicker{per: 1}, []float64{1, 1}, 3, 2)
	}()
	if tb.msg == "" {
		t.Fatal("a pick of one endpoint where two were wanted did not fail the test")
	}
}

func TestRatesMatch(t *testing.T) {
	tests := []struct {
		name        string
		rates, want []float64
		ok          bool
	}{
		{name: "within tolerance", rates: []float64{0.32, 0.35, 0.33}, want: []float64{1. / 3, 1. / 3, 1. / 3}, ok: true},
		{name: "off by more than the tolerance", rates: []float64{0.30, 0.37, 0.33}, want: []float64{1. / 3, 1. / 3, 1. / 3}},
		{name: "certain pick exact", rates: []float64{1, 0}, want: []float64{1, 0}, ok: true},
		{name: "certain pick missed once", rates: []float64{0.9999, 0.0001}, want: []float64{1, 0}},
		{name: "never pick taken once", rates: []float64{0.5, 0.4999, 0.0001}, want: []float64{0.5, 0.5, 0}},
		{name: "length mismatch", rates: []float64{0.5, 0.5}, want: []float64{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := RatesMatch(tt.rates, tt.want); (err == nil) != tt.ok {
				t.Fatalf("RatesMatch(%v, %v) = %v, want ok %v", tt.rates, tt.want, err, tt.ok)
			}
		})
	}
}
