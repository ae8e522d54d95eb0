package pluginkit

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

// Context returns h's context, or context.Background() when h or its context is nil (a test
// or a tool building a plugin without a handle).
func Context(h fwkplugin.Handle) context.Context {
	if h != nil {
		if ctx := h.Context(); ctx != nil {
			return ctx
		}
	}
	return context.Background()
}

type registererKey struct{}

// WithRegisterer returns ctx carrying reg, the registerer plugins built from a handle with
// that context register their metrics with. The EPP sets its metrics registry here before it
// creates the handle.
func WithRegisterer(ctx context.Context, reg prometheus.Registerer) context.Context {
	return context.WithValue(ctx, registererKey{}, reg)
}

// Registerer returns the registerer on h's context, or a new private registry when there is
// none, so a plugin built without an EPP registers into something of its own instead of a
// process-global registry.
func Registerer(h fwkplugin.Handle) prometheus.Registerer {
	return RegistererOf(Context(h))
}

// RegistererOf is Registerer for a context.
func RegistererOf(ctx context.Context) prometheus.Registerer {
	if reg, ok := ctx.Value(registererKey{}).(prometheus.Registerer); ok && reg != nil {
		return reg
	}
	return prometheus.NewRegistry()
}

// Register registers c with reg and returns it, or returns the collector already registered
// under the same descriptors: several instances of one plugin type (or two plugins sharing a
// metric) then update one series set instead of failing on the second registration.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("registering metrics: %w", err)
	}
	return c, nil
}

// RegisterInto registers *c as Register does and leaves in *c the collector to update, so a
// plugin's metric fields register in one expression: errors.Join(RegisterInto(reg, &m.a), …).
func RegisterInto[C prometheus.Collector](reg prometheus.Registerer, c *C) (err error) {
	*c, err = Register(reg, *c)
	return err
}

type seedKey struct{}

// WithSeed returns ctx carrying seed, the seed of the random sources of plugins built from a
// handle with that context (pickers' tie-breaks and draws, random pair selection): a run with
// the same seed, the same configuration and the same inputs makes the same decisions. The EPP
// sets it from core.Options.Seed (`pdgate bench sim` from --seed); without it every random
// source is seeded from the time, as GIE's are.
func WithSeed(ctx context.Context, seed int64) context.Context {
	return context.WithValue(ctx, seedKey{}, seed)
}

// Seed returns the seed on h's context and whether there is one.
func Seed(h fwkplugin.Handle) (int64, bool) { return SeedOf(Context(h)) }

// SeedOf is Seed for a context.
func SeedOf(ctx context.Context) (int64, bool) {
	s, ok := ctx.Value(seedKey{}).(int64)
	return s, ok
}

// SeedFor derives the seed of one random source from the context's seed and the plugin
// instance's name, so that two instances (the prefill and the decode profile's pickers) draw
// independent sequences; it returns false when the context carries no seed.
func SeedFor(h fwkplugin.Handle, name string) (uint64, bool) {
	s, ok := Seed(h)
	if !ok {
		return 0, false
	}
	x := uint64(s) ^ 0x9e3779b97f4a7c15
	for i := 0; i < len(name); i++ { // FNV-1a over the name, folded into the seed
		x ^= uint64(name[i])
		x *= 0x100000001b3
	}
	return x, true
}
