// Package mmcacheproducer is llm-d's mm-embeddings-cache-producer: it tracks, per endpoint, the
// multimodal items (images, video, audio, by content hash) recently sent to it, whose encoder
// outputs the engine's encoder cache probably still holds, and writes for every candidate how
// many of the request's items it holds ("MultiModalEncoderCacheMatchInfoKey/<name>"), for
// mm-embeddings-cache-scorer. Items come from the tokenized prompt's multimodal features
// (token-producer; its estimate backend hashes each item's content).
package mmcacheproducer

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/encodercache"
	"github.com/pdgate/pdgate/plugins/internal/lru"
)

// Type is the plugin type name.
const Type = encodercache.DefaultProducer

// DefaultCacheSizeInMBPerServer is llm-d's default.
const DefaultCacheSizeInMBPerServer = 4096

// Parameters are llm-d's parameters; CacheSizeInMB is the key llm-d's own sample config uses
// (llm-d rejects it), accepted here as an alias with a warning.
type Parameters struct {
	CacheSizeInMBPerServer int  `json:"cacheSizeInMBPerServer"`
	CacheSizeInMB          *int `json:"cacheSizeInMB"`
}

// ParseParameters decodes strictly; values <= 0 take the default (llm-d's rule). It returns
// the LRU capacity per endpoint: MB × 1 MiB / 2 MiB entries, at least 1.
func ParseParameters(name string, raw json.RawMessage, warn func(msg string)) (int, error) {
	var p Parameters
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return 0, err
	}
	mb := p.CacheSizeInMBPerServer
	if p.CacheSizeInMB != nil {
		if mb != 0 {
			return 0, fmt.Errorf("%s %q: parameters cacheSizeInMB and cacheSizeInMBPerServer both set; use cacheSizeInMBPerServer", Type, name)
		}
		mb = *p.CacheSizeInMB
		warn("parameter cacheSizeInMB is accepted as cacheSizeInMBPerServer (llm-d's name); rename it")
	}
	if mb <= 0 {
		mb = DefaultCacheSizeInMBPerServer
	}
	return max(1, mb/2), nil
}

// maxEndpoints bounds the endpoints tracked (departed endpoints are not swept individually).
const maxEndpoints = 8192

// Producer is mm-embeddings-cache-producer.
type Producer struct {
	tn  fwkplugin.TypedName
	cap int
	key string

	mu    sync.Mutex
	cache map[string]*lru.Set // endpoint → items
}

var (
	_ fwkrc.PrepareDataPlugin = (*Producer)(nil)
	_ fwkrc.PreRequest        = (*Producer)(nil)
	_ fwkdl.EndpointExtractor = (*Producer)(nil)
)

// Factory builds the producer.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	logger := log.FromContext(pluginkit.Context(handle))
	capacity, err := ParseParameters(name, raw, func(msg string) { logger.Info(msg, "plugin", Type+"/"+name) })
	if err != nil {
		return nil, err
	}
	return New(name, capacity), nil
}

// New builds the producer with capacity entries per endpoint.
func New(name string, capacity int) *Producer {
	tn := pluginkit.TypedName(Type, name)
	return &Producer{tn: tn, cap: capacity, key: encodercache.Key(tn.Name), cache: map[string]*lru.Set{}}
}

// TypedName implements fwkplugin.Plugin.
func (p *Producer) TypedName() fwkplugin.TypedName { return p.tn }

// Produces declares the match info.
func (p *Producer) Produces() map[string]any { return map[string]any{p.key: encodercache.MatchInfo{}} }

// Consumes declares the tokenized prompt.
func (p *Producer) Consumes() map[string]any {
	return map[string]any{contract.TokenizedPromptKey: contract.TokenizedPromptData{}}
}

// Items are the request's unique multimodal item hashes.
func Items(req *fwksched.LLMRequest) []string {
	if req == nil || req.TokenizedPrompt == nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	for _, f := range req.TokenizedPrompt.MultiModalFeatures {
		if f.Hash != "" && !seen[f.Hash] {
			seen[f.Hash] = true
			out = append(out, f.Hash)
		}
	}
	return out
}

// PrepareRequestData writes each candidate's match info (nothing without multimodal items).
func (p *Producer) PrepareRequestData(_ context.Context, req *fwksched.LLMRequest, eps []fwksched.Endpoint) error {
	items := Items(req)
	if len(items) == 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ep := range eps {
		matched := 0
		if l := p.cache[ep.GetMetadata().NamespacedName.String()]; l != nil {
			for _, h := range items {
				if l.Has(h) {
					matched++
				}
			}
		}
		ep.Put(p.key, &encodercache.MatchInfo{Matched: matched, Total: len(items)})
	}
	return nil
}

// PreRequest records the items on the primary profile's targets (they will encode them).
func (p *Producer) PreRequest(_ context.Context, req *fwksched.LLMRequest, result *fwksched.SchedulingResult) {
	items := Items(req)
	if len(items) == 0 || result == nil {
		return
	}
	primary := result.ProfileResults[result.PrimaryProfileName]
	if primary == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ep := range primary.TargetEndpoints {
		k := ep.GetMetadata().NamespacedName.String()
		l := p.cache[k]
		if l == nil {
			if len(p.cache) >= maxEndpoints { // endpoints churned away: start over
				clear(p.cache)
			}
			l = lru.New(p.cap)
			p.cache[k] = l
		}
		for _, h := range items {
			l.Touch(h)
		}
	}
}

// ExpectedInputType: endpoint events (wire it under endpoint-notification-source, as llm-d's
// config does, so departed endpoints are forgotten).
func (p *Producer) ExpectedInputType() reflect.Type { return fwkdl.EndpointEventReflectType }

// Extract implements fwkdl.Extractor; the producer learns nothing from polled data.
func (p *Producer) Extract(context.Context, any, fwkdl.Endpoint) error { return nil }

// ExtractEndpoint forgets a deleted endpoint's items.
func (p *Producer) ExtractEndpoint(_ context.Context, ev fwkdl.EndpointEvent) error {
	if ev.Type != fwkdl.EventDelete || ev.Endpoint == nil || ev.Endpoint.GetMetadata() == nil {
		return nil
	}
	p.mu.Lock()
	delete(p.cache, ev.Endpoint.GetMetadata().NamespacedName.String())
	p.mu.Unlock()
	return nil
}
