// Package preciseproducer implements llm-d's precise-prefix-cache-producer: it follows the
// KV-cache events the engines publish (vLLM, SGLang, over ZeroMQ) and puts on every candidate
// endpoint how much of the request's prompt that endpoint actually holds, as GIE's
// PrefixCacheMatchInfo (read by prefix-based-pd-decider, the 412 gate, prefix-cache-scorer and
// the AIBrix prefix policies) and as a tier-weighted match (read by
// precise-prefix-cache-scorer).
package preciseproducer

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/precise/internal/precisecache"
	"github.com/pdgate/pdgate/plugins/precise/kvevents"
	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
)

// Type is the plugin type name (llm-d's).
const Type = "precise-prefix-cache-producer"

var (
	_ fwkrc.PrepareDataPlugin                                = &Producer{}
	_ fwkdl.EndpointExtractor                                = &Producer{}
	_ precisecache.Owner                                     = &Producer{}
	_ fwkplugin.ProducerPlugin                               = &Producer{}
	_ fwkplugin.ConsumerPlugin                               = &Producer{}
	_ interface{ ResolveReferences(fwkplugin.Handle) error } = &Producer{}
)

// Producer is precise-prefix-cache-producer.
type Producer struct {
	typedName fwkplugin.TypedName
	params    kvevents.Config
	core      *precisecache.Core
}

// ParseParameters decodes and validates the parameters; errors name the plugin and field.
func ParseParameters(name string, raw json.RawMessage) (kvevents.Config, kvevents.Resolved, error) {
	c, r, err := kvevents.ParseConfig(Type, name, raw)
	if err != nil {
		return c, r, err
	}
	if r.HasTokenizersPool {
		return c, r, fmt.Errorf("%s %q: indexerConfig.tokenizersPoolConfig is not supported by the producer (as in llm-d): tokenize with token-producer", Type, name)
	}
	return c, r, nil
}

// Factory creates precise-prefix-cache-producer.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	if name == "" {
		name = Type
	}
	params, resolved, err := ParseParameters(name, raw)
	if err != nil {
		return nil, err
	}
	ctx := pluginkit.Context(handle)
	kvevents.LogIgnored(ctx, resolved, fwkplugin.TypedName{Type: Type, Name: name}.String())
	return New(ctx, name, params, resolved, false), nil
}

// New builds a producer; with start it runs its subscribers for as long as ctx lives.
func New(ctx context.Context, name string, params kvevents.Config, resolved kvevents.Resolved, start bool) *Producer {
	tn := fwkplugin.TypedName{Type: Type, Name: name}
	return &Producer{typedName: tn, params: params, core: precisecache.New(ctx, tn.String(), resolved, start)}
}

// TypedName implements fwkplugin.Plugin.
func (p *Producer) TypedName() fwkplugin.TypedName { return p.typedName }

// Params returns the parameters as configured.
func (p *Producer) Params() kvevents.Config { return p.params }

// DeliverKVEvents applies a batch of an endpoint's KV events in process (pdgate bench sim
// feeds its simulated engines' prefix-cache changes here instead of over ZeroMQ).
func (p *Producer) DeliverKVEvents(meta *fwkdl.EndpointMetadata, events []kvwire.Event) {
	p.core.Deliver(meta, events)
}

// PreciseCore implements precisecache.Owner.
func (p *Producer) PreciseCore() *precisecache.Core { return p.core }

// Produces implements fwkplugin.ProducerPlugin (precisecache.Produces).
func (p *Producer) Produces() map[string]any { return precisecache.Produces() }

// Consumes implements fwkplugin.ConsumerPlugin (precisecache.Consumes).
func (p *Producer) Consumes() map[string]any { return precisecache.Consumes() }

// PrepareRequestData puts each endpoint's match on it.
func (p *Producer) PrepareRequestData(ctx context.Context, request *fwksched.LLMRequest, endpoints []fwksched.Endpoint) error {
	p.core.Produce(ctx, request, endpoints)
	return nil
}

// ExpectedInputType implements fwkdl.Extractor (endpoint-notification-source's events).
func (p *Producer) ExpectedInputType() reflect.Type { return p.core.ExpectedInputType() }

// Extract implements fwkdl.Extractor.
func (p *Producer) Extract(ctx context.Context, data any, ep fwkdl.Endpoint) error {
	return p.core.Extract(ctx, data, ep)
}

// ExtractEndpoint follows endpoints as they join and leave the pool.
func (p *Producer) ExtractEndpoint(ctx context.Context, ev fwkdl.EndpointEvent) error {
	return p.core.ExtractEndpoint(ctx, ev)
}

// ResolveReferences runs once every plugin exists: the core starts (central socket, size log)
// here rather than in the factory, so building a plugin list starts nothing, and the
// approximate producers GIE's loader creates for prefix-cache-scorer are dropped, so every
// reader of PrefixCacheMatchInfo gets the precise data.
func (p *Producer) ResolveReferences(handle fwkplugin.Handle) error {
	if handle != nil {
		p.core.SetPool(handle.PodList)
		p.core.Start(pluginkit.Context(handle))
	}
	return precisecache.DropApproximateProducers(handle, p.typedName.String(), log.FromContext(pluginkit.Context(handle)))
}
