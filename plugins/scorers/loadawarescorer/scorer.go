// Package loadawarescorer is llm-d's load-aware-scorer: a candidate's score falls linearly
// with its scraped waiting-queue length q, 0.5 × (1 − min(q, threshold)/threshold), and an
// empty queue scores 0.5 (llm-d's formula: the maximum is 0.5, not 1.0, so the scorer weighs
// half as much as a [0, 1] scorer of the same weight). Unlike GIE's queue-scorer it does not
// normalise across candidates: a pod's score does not depend on the others'.
package loadawarescorer

import (
	"context"
	"encoding/json"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Type is the plugin type name.
const Type = "load-aware-scorer"

// DefaultThreshold is llm-d's default queue threshold.
const DefaultThreshold = 128

// Parameters are the scorer's parameters.
type Parameters struct {
	// Threshold is the waiting-queue length at which the score reaches 0 (default 128; a
	// non-positive value is replaced by the default with an info log, as in llm-d).
	Threshold int `json:"threshold"`
}

// ParseParameters decodes strictly and defaults the parameters.
func ParseParameters(name string, raw json.RawMessage, logger logr.Logger) (Parameters, error) {
	p := Parameters{Threshold: DefaultThreshold}
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return Parameters{}, err
	}
	if p.Threshold <= 0 {
		logger.Info("non-positive threshold, using the default", "plugin", Type+"/"+name, "threshold", p.Threshold, "default", DefaultThreshold)
		p.Threshold = DefaultThreshold
	}
	return p, nil
}

// Scorer is load-aware-scorer.
type Scorer struct {
	tn        fwkplugin.TypedName
	threshold float64
}

var _ fwksched.Scorer = (*Scorer)(nil)

// Factory builds the scorer.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p, err := ParseParameters(name, raw, log.FromContext(pluginkit.Context(handle)))
	if err != nil {
		return nil, err
	}
	return New(name, p), nil
}

// New builds the scorer.
func New(name string, p Parameters) *Scorer {
	if p.Threshold <= 0 {
		p.Threshold = DefaultThreshold
	}
	return &Scorer{tn: pluginkit.TypedName(Type, name), threshold: float64(p.Threshold)}
}

// TypedName implements fwkplugin.Plugin.
func (s *Scorer) TypedName() fwkplugin.TypedName { return s.tn }

// Category is distribution, as llm-d's.
func (s *Scorer) Category() fwksched.ScorerCategory { return fwksched.Distribution }

// Score implements fwksched.Scorer. A candidate without metrics scores as an empty queue.
func (s *Scorer) Score(_ context.Context, _ *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	out := make(map[fwksched.Endpoint]float64, len(eps))
	for _, ep := range eps {
		q := 0.0
		if m := ep.GetMetrics(); m != nil {
			q = float64(m.WaitingQueueSize)
		}
		out[ep] = Score(q, s.threshold)
	}
	return out
}

// Score is the formula.
func Score(q, threshold float64) float64 {
	if q <= 0 {
		return 0.5
	}
	return 0.5 * (1 - min(q, threshold)/threshold)
}
