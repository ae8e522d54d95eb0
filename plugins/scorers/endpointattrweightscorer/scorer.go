// Package endpointattrweightscorer is llm-d's endpoint-attribute-weight-scorer (v0.11): it
// scores candidates by a categorical endpoint attribute, such as a pod label that
// label-producer copied, through a configured weight per value. A candidate whose value is
// missing or not configured gets the lowest configured weight rather than 0, so an unlabelled
// pod is demoted to the least preferred class, never below it.
package endpointattrweightscorer

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/scalar"
)

// Type is the plugin type name.
const Type = "endpoint-attribute-weight-scorer"

// Parameters are llm-d's parameters. Producer is the optional qualifier of llm-d's later
// label-producer form: set, the attribute read is "<attributeKey>/<producer>".
type Parameters struct {
	AttributeKey string             `json:"attributeKey"`
	Producer     string             `json:"producer"`
	Weights      map[string]float64 `json:"weights"`
}

// Validate checks the parameters once decoded (pluginkit names the plugin in the error).
func (p *Parameters) Validate() error {
	if p.AttributeKey == "" {
		return fmt.Errorf("parameter attributeKey: required")
	}
	if len(p.Weights) == 0 {
		return fmt.Errorf("parameter weights: required (a map from attribute value to a positive weight)")
	}
	values := make([]string, 0, len(p.Weights))
	for v := range p.Weights {
		values = append(values, v)
	}
	sort.Strings(values) // report the same value first on every load
	for _, v := range values {
		if w := p.Weights[v]; !(w > 0) || math.IsInf(w, 0) {
			return fmt.Errorf("parameter weights[%q]: %v must be a positive number", v, w)
		}
	}
	return nil
}

// Scorer is endpoint-attribute-weight-scorer.
type Scorer struct {
	tn    fwkplugin.TypedName
	key   string
	score map[string]float64 // value → weight/maxWeight
	floor float64            // the lowest normalised weight: missing and unknown values
}

var _ fwksched.Scorer = (*Scorer)(nil)

// Factory builds the scorer: each weight over the largest.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p Parameters
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return nil, err
	}
	maxW := 0.0
	for _, w := range p.Weights {
		maxW = max(maxW, w)
	}
	s := &Scorer{tn: pluginkit.TypedName(Type, name), key: p.AttributeKey, score: make(map[string]float64, len(p.Weights)), floor: 1}
	if p.Producer != "" {
		s.key = scalar.Key(p.AttributeKey, p.Producer)
	}
	for v, w := range p.Weights {
		s.score[v] = w / maxW
		s.floor = min(s.floor, w/maxW)
	}
	return s, nil
}

// TypedName implements fwkplugin.Plugin.
func (s *Scorer) TypedName() fwkplugin.TypedName { return s.tn }

// Score gives each candidate its value's normalised weight, or the floor.
func (s *Scorer) Score(_ context.Context, _ *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	out := make(map[fwksched.Endpoint]float64, len(eps))
	for _, ep := range eps {
		out[ep] = s.floor
		if v, ok := value(ep, s.key); ok {
			if w, ok := s.score[v]; ok {
				out[ep] = w
			}
		}
	}
	return out
}

// Category is affinity (llm-d's): it carries no load signal, pair it with a load scorer.
func (s *Scorer) Category() fwksched.ScorerCategory { return fwksched.Affinity }

// value reads the attribute as text: a textual attribute (label-producer's string mode, any
// fmt.Stringer), or a number (label-producer's number mode) in its shortest decimal form, so
// that weights keyed "1" or "0.5" match numeric labels.
func value(ep fwksched.Endpoint, key string) (string, bool) {
	if ep == nil {
		return "", false
	}
	c, ok := ep.Get(key)
	if !ok {
		return "", false
	}
	switch v := c.(type) {
	case *scalar.Value:
		if v == nil {
			return "", false
		}
		return strconv.FormatFloat(v.V, 'f', -1, 64), true
	case fmt.Stringer:
		return v.String(), true
	}
	return "", false
}
