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
