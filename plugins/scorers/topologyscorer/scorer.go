// Package topologyscorer is llm-d's topology-affinity-scorer: it scores each candidate by the
// tightest topology level it shares with the other stage's pick (the peer, see
// plugins/internal/peer): host 1.0, rack 0.2, zone 0.05, region 0.02, none 0 (llm-d's fixed
// table). pdgate makes the table configurable (weights). With no peer, no peer topology or no
// candidate topology the score is 0, so the scorer never excludes anyone: it is the
// "preferred" form of topology affinity.
package topologyscorer

import (
	"context"
	"encoding/json"
	"fmt"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/peer"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Type is the plugin type name.
const Type = "topology-affinity-scorer"

// Weights is the score of each shared level.
type Weights struct {
	Host   *float64 `json:"host"`
	Rack   *float64 `json:"rack"`
	Zone   *float64 `json:"zone"`
	Region *float64 `json:"region"`
}

// Parameters are the scorer's parameters.
type Parameters struct {
	// TopologyProducerName is the topology-extractor instance whose attribute is read.
	TopologyProducerName string `json:"topologyProducerName"`
	// Weights overrides llm-d's proximity table level by level; each value in [0, 1].
	Weights *Weights `json:"weights"`
}

// DefaultWeights is llm-d's table, indexed by podmodel.Level (host, rack, zone, region, none).
var DefaultWeights = [5]float64{1.0, 0.2, 0.05, 0.02, 0}

// Config is the validated configuration.
type Config struct {
	Producer string
	Table    [5]float64
}

// ParseParameters decodes (strictly), defaults and validates the parameters.
func ParseParameters(name string, raw json.RawMessage) (Config, error) {
	var p Parameters
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return Config{}, err
	}
	c := Config{Producer: p.TopologyProducerName, Table: DefaultWeights}
	if p.Weights != nil {
		for _, w := range []struct {
			field string
			v     *float64
			lvl   podmodel.Level
		}{{"host", p.Weights.Host, podmodel.LevelHost}, {"rack", p.Weights.Rack, podmodel.LevelRack},
			{"zone", p.Weights.Zone, podmodel.LevelZone}, {"region", p.Weights.Region, podmodel.LevelRegion}} {
			if w.v == nil {
				continue
			}
			if *w.v < 0 || *w.v > 1 {
				return Config{}, fmt.Errorf("%s %q: parameter weights.%s=%v: must be in [0, 1]", Type, name, w.field, *w.v)
			}
			c.Table[w.lvl] = *w.v
		}
	}
	return c, nil
}

// Scorer is topology-affinity-scorer.
type Scorer struct {
	tn  fwkplugin.TypedName
	cfg Config
}

var _ fwksched.Scorer = (*Scorer)(nil)

// Factory builds the scorer.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return pluginkit.Build(name, raw, ParseParameters, New)
}

// New builds the scorer from a validated configuration.
func New(name string, c Config) *Scorer {
	return &Scorer{tn: pluginkit.TypedName(Type, name), cfg: c}
}

// TypedName implements fwkplugin.Plugin.
func (s *Scorer) TypedName() fwkplugin.TypedName { return s.tn }

// Category is affinity, as llm-d's.
func (s *Scorer) Category() fwksched.ScorerCategory { return fwksched.Affinity }

// Score implements fwksched.Scorer.
func (s *Scorer) Score(_ context.Context, cs *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	out := make(map[fwksched.Endpoint]float64, len(eps))
	p, _ := peer.Of(cs)
	pt, ok := podmodel.TopologyFromAttributes(p, s.cfg.Producer)
	for _, ep := range eps {
		if !ok {
			out[ep] = 0
			continue
		}
		t, has := podmodel.TopologyFromAttributes(ep, s.cfg.Producer)
		if !has {
			out[ep] = 0
			continue
		}
		out[ep] = s.cfg.Table[podmodel.CompareTopology(pt, t)]
	}
	return out
}
