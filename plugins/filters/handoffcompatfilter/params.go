package handoffcompatfilter

import (
	"encoding/json"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/handoffcompat"
)

// Parameters are the filter's parameters.
type Parameters struct {
	// NoCompatiblePrefill is what a request gets when no candidate is compatible with the
	// peer pick: local-prefill (default) or error.
	NoCompatiblePrefill string `json:"noCompatiblePrefill"`
}

// ParseParameters decodes (strictly) and validates the parameters.
func ParseParameters(name string, raw json.RawMessage) (handoffcompat.Fallback, error) {
	var p Parameters
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return "", err
	}
	fb, err := handoffcompat.ParseFallback("noCompatiblePrefill", p.NoCompatiblePrefill)
	if err != nil {
		return "", pluginkit.Errorf(Type, name, "%w", err)
	}
	return fb, nil
}

// Filter is handoff-compat-filter.
type Filter struct {
	tn       fwkplugin.TypedName
	fallback handoffcompat.Fallback
	counter  *handoffcompat.Counter
	specs    handoffcompat.Cache // what each candidate declares, read once per metadata object
}

// Factory builds the filter; its counter goes on the EPP's registerer.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	fb, err := ParseParameters(name, raw)
	var c *handoffcompat.Counter
	if err == nil {
		c, err = handoffcompat.NewCounter(pluginkit.Registerer(handle))
	}
	if err != nil {
		return nil, err
	}
	f := New(name, fb)
	f.counter = c
	return f, nil
}

// New builds the filter without metrics (tests, programmatic assemblies).
func New(name string, fb handoffcompat.Fallback) *Filter {
	return &Filter{tn: pluginkit.TypedName(Type, name), fallback: fb}
}
