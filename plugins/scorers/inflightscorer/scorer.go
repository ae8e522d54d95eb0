// Package inflightscorer is inflight-load-scorer: GIE's token-load-scorer (score 1 − in-flight
// tokens / queueThresholdTokens, from the InFlightLoad attribute that GIE's
// inflight-load-producer keeps from PreRequest to end of stream) usable next to that producer.
//
// GIE v1.5.0 cannot run the two together: its data-dependency check compares the produced and
// the consumed attribute by interface equality, and both plugins return a fresh pointer, so a
// config with both fails at startup ("data type mismatch ... InFlightLoadKey"). This plugin
// declares no consumed data (every PrepareData plugin, the producer included, runs before any
// scorer, so no ordering is lost) and otherwise is GIE's scorer.
package inflightscorer

import (
	"encoding/json"
	"fmt"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/tokenload"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Type is the plugin type name.
const Type = "inflight-load-scorer"

// DefaultQueueThresholdTokens is GIE's token-load-scorer default (128 requests of 32k tokens).
const DefaultQueueThresholdTokens = 4194304

// Parameters are the plugin's parameters.
type Parameters struct {
	// QueueThresholdTokens is the in-flight token count at which a pod's score reaches 0.
	QueueThresholdTokens int64 `json:"queueThresholdTokens"`
}

// ParseParameters decodes, defaults and validates the parameters; unknown fields are errors.
func ParseParameters(name string, raw json.RawMessage) (Parameters, error) {
	p := Parameters{QueueThresholdTokens: DefaultQueueThresholdTokens}
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return Parameters{}, err
	}
	if p.QueueThresholdTokens <= 0 {
		return Parameters{}, fmt.Errorf("%s: parameter queueThresholdTokens=%d: must be > 0", Type, p.QueueThresholdTokens)
	}
	return p, nil
}

// Scorer is GIE's token-load scorer under this plugin's name, without the consumed-data
// declaration.
type Scorer struct {
	*tokenload.TokenLoadScorer
	tn fwkplugin.TypedName
}

var _ fwksched.Scorer = (*Scorer)(nil)

// Factory builds the scorer.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p, err := ParseParameters(name, raw)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(p)
	inner, err := tokenload.TokenLoadScorerFactory(name, b, handle)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", Type, name, err)
	}
	return &Scorer{TokenLoadScorer: inner.(*tokenload.TokenLoadScorer), tn: fwkplugin.TypedName{Type: Type, Name: name}}, nil
}

// TypedName implements fwkplugin.Plugin.
func (s *Scorer) TypedName() fwkplugin.TypedName { return s.tn }

// Consumes declares nothing: see the package comment.
func (s *Scorer) Consumes() map[string]any { return nil }
