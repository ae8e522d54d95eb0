package pluginkit

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

type key struct{}

// nilCtxHandle is a handle whose Context() is nil, as a hand-built test handle may be.
type nilCtxHandle struct{ fwkplugin.Handle }

func (nilCtxHandle) Context() context.Context { return nil }

func TestContext(t *testing.T) {
	ctx := context.WithValue(context.Background(), key{}, "epp")
	tests := []struct {
		name string
		h    fwkplugin.Handle
		want any // the key's value in the returned context
	}{
		{name: "handle context", h: plugintest.Handle(ctx), want: "epp"},
		{name: "no handle", h: nil, want: nil},
		{name: "handle without context", h: nilCtxHandle{}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Context(tt.h)
			if got == nil {
				t.Fatal("nil context")
			}
			if v := got.Value(key{}); v != tt.want {
				t.Fatalf("value %v, want %v", v, tt.want)
			}
		})
	}
}

func TestSeed(t *testing.T) {
	names := func() []types.NamespacedName { return nil }
	seeded := fwkplugin.NewEppHandle(WithSeed(context.Background(), 7), names)
	unseeded := fwkplugin.NewEppHandle(context.Background(), names)
	tests := []struct {
		name     string
		h        fwkplugin.Handle
		wantSeed int64
		wantOK   bool
	}{
		{name: "seeded", h: seeded, wantSeed: 7, wantOK: true},
		{name: "seed zero is a seed", h: fwkplugin.NewEppHandle(WithSeed(context.Background(), 0), names), wantSeed: 0, wantOK: true},
		{name: "no seed", h: unseeded},
		{name: "no handle", h: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ok := Seed(tt.h)
			if s != tt.wantSeed || ok != tt.wantOK {
				t.Fatalf("Seed = %d, %v; want %d, %v", s, ok, tt.wantSeed, tt.wantOK)
			}
			if _, ok := SeedFor(tt.h, "p"); ok != tt.wantOK {
				t.Fatalf("SeedFor ok = %v, want %v", ok, tt.wantOK)
			}
		})
	}
	a, _ := SeedFor(seeded, "prefill-picker")
	b, _ := SeedFor(seeded, "decode-picker")
	a2, _ := SeedFor(seeded, "prefill-picker")
	if a == b || a != a2 {
		t.Fatalf("SeedFor: same name %d/%d must agree, different names %d/%d must differ", a, a2, a, b)
	}
}

// RegisterInto leaves in the field the collector to update: its own when it registered, the
// one registered first under the same descriptors otherwise.
func TestRegisterInto(t *testing.T) {
	reg := prometheus.NewRegistry()
	first := prometheus.NewCounter(prometheus.CounterOpts{Name: "pdgate_test_total", Help: "h"})
	if err := RegisterInto(reg, &first); err != nil {
		t.Fatal(err)
	}
	second := prometheus.NewCounter(prometheus.CounterOpts{Name: "pdgate_test_total", Help: "h"})
	if err := RegisterInto(reg, &second); err != nil || second != first {
		t.Fatalf("second registration: err %v, same collector %v", err, second == first)
	}
	other := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pdgate_test_total", Help: "other"})
	if err := RegisterInto(reg, &other); err == nil {
		t.Fatal("a conflicting collector registered")
	}
}
