// Package endpointattrfilter is llm-d's endpoint-attribute-filter: keeps the candidates whose
// numeric attribute ("<attribute>/<producer>", e.g. GPUUtilization/dcgm-extractor) passes a
// threshold. pdgate implements the schema llm-d's 2026-08 deploy config uses (see README).
package endpointattrfilter

import (
	"context"
	"encoding/json"
	"fmt"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/internal/scalar"
)

// Type is the plugin type name.
const Type = "endpoint-attribute-filter"

// Threshold is a comparison against a value.
type Threshold struct {
	Operator string   `json:"operator"`
	Value    *float64 `json:"value"`
}

// Algorithm selects the filtering rule.
type Algorithm struct {
	Type      string     `json:"type"`
	Threshold *Threshold `json:"threshold"`
}

// Parameters are the filter's parameters.
type Parameters struct {
	Attribute       string    `json:"attribute"`
	Producer        string    `json:"producer"`
	OnMissing       string    `json:"onMissing"`
	FallbackOnEmpty bool      `json:"fallbackOnEmpty"`
	Algorithm       Algorithm `json:"algorithm"`
}

var operators = map[string]func(a, b float64) bool{
	"LessThan":           func(a, b float64) bool { return a < b },
	"LessThanOrEqual":    func(a, b float64) bool { return a <= b },
	"GreaterThan":        func(a, b float64) bool { return a > b },
	"GreaterThanOrEqual": func(a, b float64) bool { return a >= b },
	"Equal":              func(a, b float64) bool { return a == b },
}

// Source implements scalar.ReaderParams.
func (p *Parameters) Source() (attrField, attribute, producer string) {
	return "attribute", p.Attribute, p.Producer
}

// Filter is endpoint-attribute-filter.
type Filter struct {
	scalar.Reader
	pass     bool // onMissing: Pass
	fallback bool
	cmp      func(a, b float64) bool
	value    float64
}

var _ fwksched.Filter = (*Filter)(nil)

// Factory builds the filter.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p Parameters
	r, err := scalar.ParseReader(Type, name, raw, &p)
	if err != nil {
		return nil, err
	}
	f := &Filter{Reader: r, fallback: p.FallbackOnEmpty}
	switch p.OnMissing {
	case "", "Drop":
	case "Pass":
		f.pass = true
	default:
		return nil, f.ParamError("onMissing", fmt.Sprintf("%q: must be Pass or Drop", p.OnMissing))
	}
	if p.Algorithm.Type != "threshold" {
		return nil, f.ParamError("algorithm.type", fmt.Sprintf("%q: only threshold is supported", p.Algorithm.Type))
	}
	th := p.Algorithm.Threshold
	if th == nil || th.Value == nil {
		return nil, f.ParamError("algorithm.threshold.value", "required")
	}
	cmp, ok := operators[th.Operator]
	if !ok {
		return nil, f.ParamError("algorithm.threshold.operator", fmt.Sprintf("%q: must be LessThan, LessThanOrEqual, GreaterThan, GreaterThanOrEqual or Equal", th.Operator))
	}
	f.cmp, f.value = cmp, *th.Value
	return f, nil
}

// Filter keeps the candidates whose value passes; a candidate without the attribute passes
// with onMissing: Pass. With fallbackOnEmpty, an empty result returns every candidate.
func (f *Filter) Filter(_ context.Context, _ *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) []fwksched.Endpoint {
	kept := make([]fwksched.Endpoint, 0, len(eps))
	for _, ep := range eps {
		v, ok := scalar.Read(ep, f.Key)
		if (!ok && f.pass) || (ok && f.cmp(v, f.value)) {
			kept = append(kept, ep)
		}
	}
	if len(kept) == 0 && f.fallback {
		return eps
	}
	return kept
}
