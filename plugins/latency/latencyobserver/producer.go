// Package latencyobserver is llm-d v0.11's latency-observer-producer-hub: a black-box observer
// of the EPP's own traffic. It records each streamed request's time to first token with the
// endpoint's in-flight count at dispatch, and every intervalDuration publishes per endpoint the
// anchors latency-observation-scorer-hub predicts TTFT from (plugins/latency/internal/ttftpercentiles).
// Nothing is scraped.
//
// Unlike llm-d, the recompute tick is started by the plugin itself: llm-d only ticks it when
// it is listed under dataLayer.sources, and otherwise every endpoint stays cold. Listing it
// there is accepted (it is a polling data source that binds no extractors) and changes
// nothing.
package latencyobserver

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"time"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/latency/internal/ttftpercentiles"
)

// Type is the plugin type name.
const Type = ttftpercentiles.ProducerType

// dispatch is a request sent to an endpoint whose first response chunk has not come yet.
type dispatch struct {
	endpoint string
	at       time.Time
	inflight int64
}

var _ interface {
	fwkrc.PrepareDataPlugin
	fwkrc.PreRequest
	fwkrc.ResponseBody
	fwkdl.PollingDataSource
	fwkdl.ValidatingDataSource
} = (*Producer)(nil)

// Producer is latency-observer-producer-hub.
type Producer struct {
	tn      fwkplugin.TypedName
	params  Parameters
	dataKey string
	ctx     context.Context
	now     func() time.Time
	tick    sync.Once

	mu        sync.Mutex
	endpoints map[string]*endpointState
	pending   map[*fwksched.LLMRequest]dispatch
	// published is replaced whole by each recompute and never written after.
	published map[string]*ttftpercentiles.TTFTPercentiles
}

// Factory builds the producer.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return pluginkit.Build(name, raw, ParseParameters, func(name string, p Parameters) *Producer {
		return New(pluginkit.Context(handle), name, p, time.Now)
	})
}

// New builds the producer; its tick runs on ctx from the first request on, reading now.
func New(ctx context.Context, name string, p Parameters, now func() time.Time) *Producer {
	tn := pluginkit.TypedName(Type, name)
	return &Producer{tn: tn, params: p, dataKey: ttftpercentiles.DataKey(tn.Name), ctx: ctx, now: now,
		endpoints: map[string]*endpointState{}, pending: map[*fwksched.LLMRequest]dispatch{}}
}

// TypedName implements fwkplugin.Plugin.
func (p *Producer) TypedName() fwkplugin.TypedName { return p.tn }

// ResolveReferences makes sure an inflight-load-producer runs (llm-d auto-creates it from
// this producer's required data key).
func (p *Producer) ResolveReferences(handle fwkplugin.Handle) error {
	if err := ttftpercentiles.EnsureInFlightProducer(handle, p.params.InFlightLoadProducerName); err != nil {
		return pluginkit.Errorf(Type, p.tn.Name, "%w", err)
	}
	return nil
}

// Produces declares the snapshot attribute.
func (p *Producer) Produces() map[string]any {
	return map[string]any{p.dataKey: ttftpercentiles.TTFTPercentiles{}}
}

// Consumes declares nothing: the in-flight count is read in PreRequest, after every
// PrepareData plugin has run, so no ordering is needed (and GIE v1.5.0's dependency check
// cannot match inflight-load-producer's pointer-typed declaration).
func (p *Producer) Consumes() map[string]any { return nil }

// PrepareRequestData puts each candidate's latest snapshot on it for the scorer.
func (p *Producer) PrepareRequestData(_ context.Context, _ *fwksched.LLMRequest, endpoints []fwksched.Endpoint) error {
	p.start()
	p.mu.Lock()
	snaps := p.published
	p.mu.Unlock()
	for _, ep := range endpoints {
		if m := snaps[ep.GetMetadata().NamespacedName.String()]; m != nil {
			ep.Put(p.dataKey, m)
		}
	}
	return nil
}

// PreRequest records the decision: the primary target and its in-flight count before this
// request joined it.
func (p *Producer) PreRequest(_ context.Context, req *fwksched.LLMRequest, result *fwksched.SchedulingResult) {
	target := primaryTarget(result)
	if req == nil || target == nil {
		return
	}
	inflight, _ := ttftpercentiles.InFlight(target)
	p.start()
	p.mu.Lock()
	p.pending[req] = dispatch{endpoint: target.GetMetadata().NamespacedName.String(), at: p.now(), inflight: inflight}
	p.mu.Unlock()
}

// primaryTarget is the primary profile's first pick, nil when there is none.
func primaryTarget(result *fwksched.SchedulingResult) fwksched.Endpoint {
	if result == nil {
		return nil
	}
	if primary := result.ProfileResults[result.PrimaryProfileName]; primary != nil && len(primary.TargetEndpoints) > 0 {
		if ep := primary.TargetEndpoints[0]; ep != nil && ep.GetMetadata() != nil {
			return ep
		}
	}
	return nil
}

// ResponseBody takes the first chunk of a streamed response as the request's TTFT sample. A
// body that comes whole (its first call is the end of stream) covers every decode step, far
// above the TTFT, and is discarded.
func (p *Producer) ResponseBody(_ context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, _ *fwkdl.EndpointMetadata) {
	if req == nil || resp == nil {
		return
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	d, ok := p.pending[req]
	if !ok {
		return
	}
	delete(p.pending, req)
	if resp.EndOfStream {
		return
	}
	s := p.endpoints[d.endpoint]
	if s == nil {
		s = &endpointState{}
		p.endpoints[d.endpoint] = s
	}
	s.add(observation{at: now, ttft: now.Sub(d.at).Seconds(), inflight: float64(d.inflight)}, p.params.WindowSize)
}

// start runs the recompute tick from the first request on, for the handle's lifetime.
func (p *Producer) start() {
	p.tick.Do(func() {
		go pluginkit.Every(p.ctx, p.params.IntervalDuration.Duration, func() { p.recompute(p.now()) })
	})
}

// recompute publishes every endpoint's snapshot, closes due floor buckets, forgets endpoints
// that left the pool and dispatches whose response never came.
func (p *Producer) recompute(now time.Time) {
	var inPool map[string]bool
	if list := pluginkit.EndpointsOf(p.ctx); list != nil {
		inPool = map[string]bool{}
		for _, ep := range list() {
			inPool[ep.GetMetadata().NamespacedName.String()] = true
		}
	}
	p.mu.Lock()
	for req, d := range p.pending {
		if now.Sub(d.at) > p.params.MaxObservationAge.Duration {
			delete(p.pending, req)
		}
	}
	snaps := make(map[string]*ttftpercentiles.TTFTPercentiles, len(p.endpoints))
	for id, s := range p.endpoints {
		if inPool != nil && !inPool[id] {
			delete(p.endpoints, id)
			continue
		}
		s.rollBucket(now, p.params.BucketDuration.Duration, p.params.BucketHistorySize)
		snaps[id] = s.snapshot(now, p.params)
	}
	p.published = snaps
	p.mu.Unlock()
}

// OutputType implements fwkdl.DataSource: listed under dataLayer.sources (llm-d's way to tick
// it) the producer polls nothing.
func (p *Producer) OutputType() reflect.Type {
	return reflect.TypeFor[*ttftpercentiles.TTFTPercentiles]()
}

// ExtractorType implements fwkdl.DataSource.
func (p *Producer) ExtractorType() reflect.Type { return fwkdl.ExtractorType }

// Poll implements fwkdl.PollingDataSource; the producer's own tick does the work.
func (p *Producer) Poll(context.Context, fwkdl.Endpoint) (any, error) { return nil, nil }

// ValidateExtractor refuses every extractor: the producer publishes its own state.
func (p *Producer) ValidateExtractor(fwkdl.Extractor) error {
	return errors.New(Type + " publishes its own attribute and binds no extractors")
}
