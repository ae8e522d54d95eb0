// Package mmcachescorer is llm-d's mm-embeddings-cache-scorer: matched / total of the request's
// multimodal items an endpoint's encoder cache holds (mm-embeddings-cache-producer), 0 without
// information.
package mmcachescorer

import (
	"context"
	"encoding/json"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/encodercache"
)

// Type is the plugin type name.
const Type = "mm-embeddings-cache-scorer"

// Parameters are llm-d's parameters.
type Parameters struct {
	// ProducerName is the producer instance read (default mm-embeddings-cache-producer).
	ProducerName string `json:"producerName"`
}

// Scorer is mm-embeddings-cache-scorer.
type Scorer struct {
	tn  fwkplugin.TypedName
	key string
}

var _ fwksched.Scorer = (*Scorer)(nil)

// Factory builds the scorer.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p Parameters
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return nil, err
	}
	return &Scorer{tn: pluginkit.TypedName(Type, name), key: encodercache.Key(p.ProducerName)}, nil
}

// TypedName implements fwkplugin.Plugin.
func (s *Scorer) TypedName() fwkplugin.TypedName { return s.tn }

// Category is affinity.
func (s *Scorer) Category() fwksched.ScorerCategory { return fwksched.Affinity }

// Score implements fwksched.Scorer.
func (s *Scorer) Score(_ context.Context, _ *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	out := make(map[fwksched.Endpoint]float64, len(eps))
	for _, ep := range eps {
		out[ep] = 0
		if v, ok := ep.Get(s.key); ok {
			if m, ok := v.(*encodercache.MatchInfo); ok && m != nil && m.Total > 0 {
				out[ep] = float64(m.Matched) / float64(m.Total)
			}
		}
	}
	return out
}
