// Package precisescorer implements llm-d's precise-prefix-cache-scorer (deprecated in llm-d in
// favour of precise-prefix-cache-producer + prefix-cache-scorer, still in its configs): it
// scores each endpoint by the tier-weighted share of the prompt the engines report it holds.
// Declared next to a precise-prefix-cache-producer it reads that producer's data and ignores
// its own parameters (llm-d's rule); alone, it runs its own KV-event index and subscribers and
// publishes the same attributes a producer does, so prefix-based-pd-decider and the 412 gate
// work with it too.
package precisescorer

import (
	"context"
	"encoding/json"
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
const Type = "precise-prefix-cache-scorer"

var (
	_ fwksched.Scorer          = &Scorer{}
	_ fwkrc.PrepareDataPlugin  = &Scorer{}
	_ fwkplugin.ProducerPlugin = &Scorer{}
	_ fwkplugin.ConsumerPlugin = &Scorer{}
	_ fwkdl.EndpointExtractor  = &Scorer{}
)

// Scorer is precise-prefix-cache-scorer.
type Scorer struct {
	typedName fwkplugin.TypedName
	params    kvevents.Config
	own       *precisecache.Core
	ctx       context.Context
	bound     string // the producer read, when one is declared
}

// Factory creates precise-prefix-cache-scorer. Its own subscribers start only once the whole
// configuration is known (ResolveReferences), so a declared producer is never doubled.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	if name == "" {
		name = Type
	}
	params, resolved, err := kvevents.ParseConfig(Type, name, raw)
	if err != nil {
		return nil, err
	}
	tn := fwkplugin.TypedName{Type: Type, Name: name}
	ctx := pluginkit.Context(handle)
	kvevents.LogIgnored(ctx, resolved, tn.String())
	if resolved.HasTokenizersPool {
		log.FromContext(ctx).Info("indexerConfig.tokenizersPoolConfig is accepted and unused: prompts are tokenized by token-producer", "plugin", tn.String())
	}
	return &Scorer{typedName: tn, params: params, ctx: ctx, own: precisecache.New(ctx, tn.String(), resolved, false)}, nil
}

// TypedName implements fwkplugin.Plugin.
func (s *Scorer) TypedName() fwkplugin.TypedName { return s.typedName }

// Params returns the parameters as configured.
func (s *Scorer) Params() kvevents.Config { return s.params }

// BoundTo names the precise-prefix-cache-producer whose data the scorer reads, "" when it
// runs its own index.
func (s *Scorer) BoundTo() string { return s.bound }

// DeliverKVEvents applies a batch of an endpoint's KV events in process when the scorer runs
// its own index (a scorer bound to a producer ignores them: the producer takes them). pdgate
// bench sim feeds its simulated engines' prefix-cache changes here instead of over ZeroMQ.
func (s *Scorer) DeliverKVEvents(meta *fwkdl.EndpointMetadata, events []kvwire.Event) {
	if s.own != nil {
		s.own.Deliver(meta, events)
	}
}

// Category implements fwksched.Scorer.
func (s *Scorer) Category() fwksched.ScorerCategory { return fwksched.Affinity }

// ResolveReferences binds to a declared precise producer, or starts the scorer's own index
// and drops the approximate producers (the scorer then produces PrefixCacheMatchInfo).
func (s *Scorer) ResolveReferences(handle fwkplugin.Handle) error {
	logger := log.FromContext(pluginkit.Context(handle))
	if handle != nil {
		for _, p := range handle.GetAllPlugins() {
			if o, ok := p.(precisecache.Owner); ok && p != fwkplugin.Plugin(s) {
				s.bound = o.TypedName().String()
				s.own = nil
				logger.Info("precise-prefix-cache-scorer reads the declared producer; its own parameters are ignored (llm-d's rule)",
					"plugin", s.typedName.String(), "producer", s.bound)
				return nil
			}
		}
	}
	if handle != nil {
		s.own.SetPool(handle.PodList)
		s.own.Start(s.ctx)
	}
	return precisecache.DropApproximateProducers(handle, s.typedName.String(), logger)
}

// The scorer is also an extractor of endpoint-notification-source, as llm-d's was in May 2026
// (before the producer existed, configs listed the scorer under that source's extractors to
// give each pod its KV-event subscriber as the pod joins and leaves). Its own index follows
// the pool either way; bound to a producer, it leaves the events to the producer.

// ExpectedInputType implements fwkdl.Extractor: endpoint-notification-source's events.
func (s *Scorer) ExpectedInputType() reflect.Type { return fwkdl.EndpointEventReflectType }

// Extract implements fwkdl.Extractor (endpoint events come through ExtractEndpoint).
func (s *Scorer) Extract(context.Context, any, fwkdl.Endpoint) error { return nil }

// ExtractEndpoint tracks an endpoint that joined the pool and forgets one that left.
func (s *Scorer) ExtractEndpoint(ctx context.Context, ev fwkdl.EndpointEvent) error {
	if s.own == nil {
		return nil
	}
	return s.own.ExtractEndpoint(ctx, ev)
}

// Produces implements fwkplugin.ProducerPlugin: the match attributes, unless a producer does.
func (s *Scorer) Produces() map[string]any {
	if s.own == nil {
		return map[string]any{}
	}
	return precisecache.Produces()
}

// Consumes implements fwkplugin.ConsumerPlugin.
func (s *Scorer) Consumes() map[string]any {
	if s.own == nil {
		return map[string]any{precisecache.MatchInfoKey: precisecache.MatchInfoType}
	}
	return precisecache.Consumes()
}

// PrepareRequestData computes the matches when the scorer runs its own index.
func (s *Scorer) PrepareRequestData(ctx context.Context, request *fwksched.LLMRequest, endpoints []fwksched.Endpoint) error {
	if s.own != nil {
		s.own.Produce(ctx, request, endpoints)
	}
	return nil
}

// Score is llm-d's: the tier-weighted matched blocks over the request's blocks.
func (s *Scorer) Score(_ context.Context, _ *fwksched.CycleState, _ *fwksched.LLMRequest, endpoints []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	out := make(map[fwksched.Endpoint]float64, len(endpoints))
	for _, ep := range endpoints {
		out[ep] = precisecache.Score(ep)
	}
	return out
}
