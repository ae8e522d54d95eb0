// Package topologyextractor is llm-d's topology-extractor: it stamps every candidate endpoint
// with where its pod runs (hostname, rack, zone, region) as the endpoint attribute
// "Topology/<instance name>", for topology-affinity-filter and topology-affinity-scorer.
// The labels are resolved by plugins/lib/podmodel (the per-level override labels
// topology.pdgate.io/* first, then the configured or well-known label).
package topologyextractor

import (
	"context"
	"encoding/json"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Type is the plugin type name.
const Type = "topology-extractor"

// Parameters name the pod label read for each level; empty means the well-known label.
type Parameters struct {
	Hostname string `json:"hostname"`
	Rack     string `json:"rack"`
	Zone     string `json:"zone"`
	Region   string `json:"region"`
}

// ParseParameters decodes the parameters strictly (unknown fields are errors).
func ParseParameters(name string, raw json.RawMessage) (Parameters, error) {
	var p Parameters
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return Parameters{}, err
	}
	return p, nil
}

// Extractor is topology-extractor.
type Extractor struct {
	tn     fwkplugin.TypedName
	labels podmodel.TopologyLabels
	key    string
}

var _ fwkrc.PrepareDataPlugin = (*Extractor)(nil)

// Factory builds the extractor.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return pluginkit.Build(name, raw, ParseParameters, New)
}

// New builds the extractor from parsed parameters.
func New(name string, p Parameters) *Extractor {
	return &Extractor{
		tn:     pluginkit.TypedName(Type, name),
		labels: podmodel.TopologyLabels{Hostname: p.Hostname, Rack: p.Rack, Zone: p.Zone, Region: p.Region}.WithDefaults(),
		key:    podmodel.TopologyAttributeKey(name),
	}
}

// TypedName implements fwkplugin.Plugin.
func (e *Extractor) TypedName() fwkplugin.TypedName { return e.tn }

// Produces declares the topology attribute.
func (e *Extractor) Produces() map[string]any {
	return map[string]any{e.key: &podmodel.TopologyAttribute{}}
}

// Consumes declares nothing.
func (e *Extractor) Consumes() map[string]any { return nil }

// PrepareRequestData stamps each endpoint whose labels name at least one level; an endpoint
// with no topology label gets no attribute (the filter then drops it, the scorer gives 0).
func (e *Extractor) PrepareRequestData(_ context.Context, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) error {
	for _, ep := range eps {
		if ep == nil || ep.GetMetadata() == nil {
			continue
		}
		t := podmodel.TopologyOf(ep.GetMetadata().Labels, e.labels)
		if t.IsZero() {
			continue
		}
		if old, ok := podmodel.TopologyFromAttributes(ep, e.tn.Name); ok && old == t {
			continue
		}
		ep.Put(e.key, &podmodel.TopologyAttribute{Topology: t})
	}
	return nil
}
