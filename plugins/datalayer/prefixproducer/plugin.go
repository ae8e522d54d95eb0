// Package prefixproducer implements pdgate-prefix-cache-producer: GIE v1.5.0's
// approx-prefix-cache-producer (same parameters, same PrefixCacheMatchInfo attribute, same
// index and matching) hashing the prompt text where it lies instead of re-marshalling the
// chat messages to JSON first.
package prefixproducer

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metrics"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Type is the plugin type name.
const Type = "pdgate-prefix-cache-producer"

// GIEType is GIE v1.5.0's approx-prefix-cache-producer type, under which the EPP runs this
// producer in place of the one GIE's loader creates for prefix-cache-scorer.
const GIEType = "approx-prefix-cache-producer"

// AutoName is the instance name of the producer the EPP adds for PrefixCacheMatchInfo
// consumers when the configuration declares no producer of that key.
const AutoName = Type

// prefillProfile is the profile whose pick is also recorded (GIE's
// experimentalDefaultPrefillProfile).
const prefillProfile = "prefill"

// podActiveCheckInterval is how often servers no longer in the pool leave the index (GIE's).
const podActiveCheckInterval = 2 * time.Minute

var (
	_ fwkrc.PrepareDataPlugin = &Producer{}
	_ fwkrc.PreRequest        = &Producer{}
)

// Producer is pdgate-prefix-cache-producer.
type Producer struct {
	typedName fwkplugin.TypedName
	params    Parameters
	idx       *index
	// requestKey is the endpoint attribute that carries this producer's request blocks from
	// PrepareRequestData to PreRequest on the request's own endpoint snapshots, so no table
	// keyed by request ID outlives a request.
	requestKey string
	wg         sync.WaitGroup
	// handle, when set, runs the size metric and the departed-pod sweep (run) from the first
	// request on, so a factory call alone (validation, a failed reload) starts nothing.
	handle  fwkplugin.Handle
	runOnce sync.Once
}

// requestBlocks is what PreRequest needs of PrepareRequestData: the request's block hashes
// and each server's matched blocks. One value is shared by every endpoint of the request and
// never changed after it is put, so cloning it is sharing it.
type requestBlocks struct {
	hashes  []blockHash
	matches map[serverID]int
}

// Clone implements datalayer.Cloneable.
func (r *requestBlocks) Clone() fwkdl.Cloneable { return r }

// TypedName implements fwkplugin.Plugin.
func (p *Producer) TypedName() fwkplugin.TypedName { return p.typedName }

// Params returns the effective parameters.
func (p *Producer) Params() Parameters { return p.params }

// Produces implements fwkplugin.ProducerPlugin: GIE's prefix match attribute.
func (p *Producer) Produces() map[string]any {
	return map[string]any{attrprefix.PrefixCacheMatchInfoKey: attrprefix.PrefixCacheMatchInfo{}}
}

// Consumes implements fwkplugin.ConsumerPlugin (nothing).
func (p *Producer) Consumes() map[string]any { return map[string]any{} }

// BlockSize is the block size in tokens: the first endpoint's CacheBlockSize when autoTune is
// on and the metric is known, else blockSizeTokens.
func (p *Producer) BlockSize(endpoints []fwksched.Endpoint) int {
	if !p.params.AutoTune || len(endpoints) == 0 {
		return p.params.BlockSizeTokens
	}
	if m := endpoints[0].GetMetrics(); m != nil && m.CacheBlockSize > 0 {
		return m.CacheBlockSize
	}
	return p.params.BlockSizeTokens
}

// PrepareRequestData hashes the prompt, matches it against the index and puts each
// endpoint's PrefixCacheMatchInfo (matched blocks, total blocks, block size).
func (p *Producer) PrepareRequestData(ctx context.Context, request *fwksched.LLMRequest, endpoints []fwksched.Endpoint) error {
	if p.handle != nil {
		p.runOnce.Do(func() { go p.run(pluginkit.Context(p.handle), p.handle) })
	}
	blockSize := p.BlockSize(endpoints)
	hashes := hashPrompt(request, blockSize, p.params.MaxBlocks(blockSize))
	matches := p.idx.matchLongestPrefix(hashes)
	// GIE's match value has getters only, so the endpoints that match nothing (most of them,
	// most of the time) share one.
	var none *attrprefix.PrefixCacheMatchInfo
	for _, ep := range endpoints {
		info, n := none, matches[ep.GetMetadata().NamespacedName]
		if n > 0 || info == nil {
			info = attrprefix.NewPrefixCacheMatchInfo(n, len(hashes), blockSize)
		}
		if n == 0 {
			none = info
		}
		ep.Put(attrprefix.PrefixCacheMatchInfoKey, info)
	}
	rb := &requestBlocks{hashes: hashes, matches: matches}
	for _, ep := range endpoints {
		ep.Put(p.requestKey, rb)
	}
	return nil
}

// PreRequest records the request's blocks for the picked endpoint of the primary profile and
// of the "prefill" profile, asynchronously, and records GIE's prefix indexer hit metrics.
func (p *Producer) PreRequest(ctx context.Context, request *fwksched.LLMRequest, result *fwksched.SchedulingResult) {
	if request == nil || result == nil {
		return
	}
	primary := result.ProfileResults[result.PrimaryProfileName]
	if primary == nil || len(primary.TargetEndpoints) == 0 {
		return
	}
	target := primary.TargetEndpoints[0]
	v, ok := target.Get(p.requestKey)
	st, _ := v.(*requestBlocks)
	if !ok || st == nil {
		log.FromContext(ctx).V(logutil.DEFAULT).Info("no prefix blocks on the picked endpoint", "plugin", p.typedName.String(), "requestID", request.RequestId)
		return
	}
	type srv struct {
		id       serverID
		blocks   int
		reported bool
	}
	blockSize := p.BlockSize(primary.TargetEndpoints)
	server := func(e fwksched.Endpoint) srv {
		blocks, reported := p.capacityBlocks(e, blockSize)
		return srv{e.GetMetadata().NamespacedName, blocks, reported}
	}
	servers := []srv{server(target)}
	if pr := result.ProfileResults[prefillProfile]; pr != nil && len(pr.TargetEndpoints) > 0 {
		servers = append(servers, server(pr.TargetEndpoints[0]))
	}
	p.wg.Go(func() {
		for _, s := range servers {
			p.idx.add(st.hashes, s.id, s.blocks, s.reported)
		}
	})
	total := len(st.hashes)
	metrics.RecordPrefixCacheMatch(st.matches[target.GetMetadata().NamespacedName]*blockSize*CharactersPerToken,
		total*blockSize*CharactersPerToken)
}

var _ contract.Settler = (*Producer)(nil)

// Wait returns once the index writes of every earlier PreRequest are applied: PreRequest
// records a request's blocks asynchronously (as GIE does), so whether the next request sees
// them depends on goroutine scheduling; `pdgate bench sim` waits after each scheduling call so
// that a run repeats for a seed.
func (p *Producer) Wait() { p.wg.Wait() }

// capacityBlocks is a server's index capacity: its GPU blocks (CacheNumBlocks with autoTune,
// else lruCapacityPerServer) plus its offload tier's, in blocks of blockSize tokens. reported
// says the GPU part is the server's own count, not autoTune's default for a server whose
// metrics have not shown it yet. GIE v1.5.0 falls back to its default capacity even without
// autoTune, so lruCapacityPerServer changed nothing there; pdgate honours it, which is what
// bounds the index's memory on a large fleet (docs/operations.md, "EPP memory at fleet scale").
func (p *Producer) capacityBlocks(ep fwksched.Endpoint, blockSize int) (blocks int, reported bool) {
	gpu := p.params.LRUCapacityPerServer
	if p.params.AutoTune {
		gpu = DefaultLRUCapacityPerServer
		if m := ep.GetMetrics(); m != nil && m.CacheNumBlocks > 0 {
			gpu, reported = m.CacheNumBlocks, true
		}
	}
	if p.params.OffloadTokensPerServer > 0 && blockSize > 0 {
		gpu += p.params.OffloadTokensPerServer / blockSize
	}
	return gpu, reported
}

// run keeps the index to the pool's servers, reports the index size each second (GIE's
// prefix_indexer_size).
func (p *Producer) run(ctx context.Context, handle fwkplugin.Handle) {
	lastCheck := time.Now()
	pluginkit.Every(ctx, time.Second, func() {
		metrics.RecordPrefixCacheSize(int64(p.idx.size()))
		now := time.Now()
		if handle == nil || now.Sub(lastCheck) < podActiveCheckInterval {
			return
		}
		lastCheck = now
		active := map[serverID]struct{}{}
		for _, n := range handle.PodList() {
			active[n] = struct{}{}
		}
		for _, s := range p.idx.pods() {
			if _, ok := active[s]; !ok {
				p.idx.removePod(s)
			}
		}
	})
}

// New builds a producer named name; with a handle it also starts its background loop, bound
// to the handle's context.
func New(name string, params Parameters, handle fwkplugin.Handle) *Producer {
	return newProducer(fwkplugin.TypedName{Type: Type, Name: name}, params, handle)
}

// NewPrefixCacheScorerProducer builds the producer GIE's loader adds for prefix-cache-scorer,
// under GIE's type and name (approx-prefix-cache-producer), from the scorer's parameters read
// as GIE reads them (unknown fields ignored). The EPP adds it before the loader runs, so the
// loader finds a producer of that type and does not create GIE's, which JSON-marshals the
// chat messages of every request (most of the EPP's CPU on long prompts); plugin metrics keep
// GIE's type label.
func NewPrefixCacheScorerProducer(raw json.RawMessage, handle fwkplugin.Handle) (*Producer, error) {
	params := DefaultParameters()
	if !pluginkit.IsEmpty(raw) {
		if err := json.Unmarshal(raw, &params); err != nil {
			return nil, fmt.Errorf("%s (for prefix-cache-scorer): failed to unmarshal prefix cache parameters: %w", GIEType, err)
		}
	}
	if err := params.validate(); err != nil {
		return nil, fmt.Errorf("%s (for prefix-cache-scorer): %w", GIEType, err)
	}
	return newProducer(fwkplugin.TypedName{Type: GIEType, Name: GIEType}, params, handle), nil
}

func newProducer(name fwkplugin.TypedName, params Parameters, handle fwkplugin.Handle) *Producer {
	p := &Producer{typedName: name, params: params, idx: newIndex(params.LRUCapacityPerServer),
		requestKey: "pdgate/prefix-request-blocks/" + name.Name, handle: handle}
	return p
}

// Factory creates pdgate-prefix-cache-producer.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	params, err := ParseParameters(name, raw)
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = Type
	}
	return New(name, params, handle), nil
}
