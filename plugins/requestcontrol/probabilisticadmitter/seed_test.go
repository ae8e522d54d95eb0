package probabilisticadmitter

import (
	"context"
	"slices"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

// With a seed on the EPP the shedding draws repeat; without one they are time-seeded.
func TestDrawsFollowTheEPPSeed(t *testing.T) {
	handle := func(seed *int64) fwkplugin.Handle {
		ctx := context.Background()
		if seed != nil {
			ctx = pluginkit.WithSeed(ctx, *seed)
		}
		return plugintest.Handle(ctx)
	}
	draws := func(h fwkplugin.Handle) []float64 {
		pl, err := Factory("a", nil, h)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]float64, 10)
		for i := range out {
			out[i] = pl.(*Admitter).rand()
		}
		return out
	}
	one, two := int64(1), int64(2)
	tests := []struct {
		name string
		a, b *int64
		same bool
	}{
		{name: "same seed", a: &one, b: &one, same: true},
		{name: "other seed", a: &one, b: &two, same: false},
		{name: "no seed", a: nil, b: nil, same: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := slices.Equal(draws(handle(tt.a)), draws(handle(tt.b))); got != tt.same {
				t.Fatalf("draws equal = %v, want %v", got, tt.same)
			}
		})
	}
}
