// Package endpointattrscorer is llm-d's endpoint-attribute-scorer: scores candidates linearly
// by a numeric attribute ("<attributeKey>/<producer>", e.g. GPUUtilization/dcgm-extractor)
// over a fixed range. pdgate implements the schema llm-d's 2026-08 deploy config uses.
package endpointattrscorer

import (
	"context"
	"encoding/json"
	"fmt"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/internal/scalar"
)

// Type is the plugin type name.
const Type = "endpoint-attribute-scorer"

// Range is a fixed normalisation range.
type Range struct {
	Min *float64 `json:"min"`
	Max *float64 `json:"max"`
}

// Normalization selects how values map to [0, 1].
type Normalization struct {
	FixedRange *Range `json:"fixedRange"`
}

// Algorithm selects the scoring rule.
type Algorithm struct {
	Type          string        `json:"type"`
	Normalization Normalization `json:"normalization"`
}

// Parameters are the scorer's parameters.
type Parameters struct {
	AttributeKey string    `json:"attributeKey"`
	Producer     string    `json:"producer"`
	Algorithm    Algorithm `json:"algorithm"`
}

// Source implements scalar.ReaderParams.
func (p *Parameters) Source() (attrField, attribute, producer string) {
	return "attributeKey", p.AttributeKey, p.Producer
}

// Scorer is endpoint-attribute-scorer.
type Scorer struct {
	scalar.Reader
	lo, hi      float64
	lowerBetter bool
}

var _ fwksched.Scorer = (*Scorer)(nil)

// Factory builds the scorer.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p Parameters
	r, err := scalar.ParseReader(Type, name, raw, &p)
	if err != nil {
		return nil, err
	}
	s := &Scorer{Reader: r, lo: 0, hi: 1}
	switch p.Algorithm.Type {
	case "linear_lower_is_better":
		s.lowerBetter = true
	case "linear_higher_is_better":
	default:
		return nil, s.ParamError("algorithm.type", fmt.Sprintf("%q: must be linear_lower_is_better or linear_higher_is_better", p.Algorithm.Type))
	}
	if r := p.Algorithm.Normalization.FixedRange; r != nil {
		if r.Min != nil {
			s.lo = *r.Min
		}
		if r.Max != nil {
			s.hi = *r.Max
		}
	}
	if s.hi <= s.lo {
		return nil, s.ParamError("algorithm.normalization.fixedRange", fmt.Sprintf("max %v must exceed min %v", s.hi, s.lo))
	}
	return s, nil
}

// Score maps the value, clamped to the range, linearly onto [0, 1]; a candidate without the
// attribute scores 0.
func (s *Scorer) Score(_ context.Context, _ *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	out := make(map[fwksched.Endpoint]float64, len(eps))
	for _, ep := range eps {
		v, ok := scalar.Read(ep, s.Key)
		if !ok {
			out[ep] = 0
			continue
		}
		x := (min(max(v, s.lo), s.hi) - s.lo) / (s.hi - s.lo)
		if s.lowerBetter {
			x = 1 - x
		}
		out[ep] = x
	}
	return out
}

// Category is distribution (a load signal).
func (s *Scorer) Category() fwksched.ScorerCategory { return fwksched.Distribution }
