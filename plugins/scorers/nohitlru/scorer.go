// Package nohitlru is llm-d's no-hit-lru-scorer: spreads cold requests (no candidate holds any
// of the prompt's prefix) over the pool by least-recent cold assignment, so cold prompts do not
// pile onto the pod that happens to score best on load; warm requests get a neutral 0.5 and are
// left to the prefix scorer.
package nohitlru

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/lru"
)

// Type is the plugin type name.
const Type = "no-hit-lru-scorer"

// DefaultLRUSize is the number of endpoints remembered.
const DefaultLRUSize = 1024

// Parameters are llm-d's parameters.
type Parameters struct {
	LRUSize int `json:"lruSize"`
	// PrefixPluginType / PrefixPluginName name the prefix plugin whose match info is read
	// (llm-d's defaults prefix-cache-scorer); pdgate reads PrefixCacheMatchInfo from whichever
	// producer is configured and accepts them for compatibility.
	PrefixPluginType string `json:"prefixPluginType"`
	PrefixPluginName string `json:"prefixPluginName"`
}

// Scorer is no-hit-lru-scorer.
type Scorer struct {
	tn fwkplugin.TypedName

	mu     sync.Mutex
	recent *lru.Set // the cold assignments' endpoints, most recent first
}

var (
	_ fwksched.Scorer  = (*Scorer)(nil)
	_ fwkrc.PreRequest = (*Scorer)(nil)
)

// Factory builds the scorer.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p := Parameters{LRUSize: DefaultLRUSize}
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return nil, err
	}
	if p.LRUSize <= 0 {
		return nil, fmt.Errorf("%s %q: parameter lruSize=%d: must be > 0", Type, name, p.LRUSize)
	}
	return New(name, p.LRUSize), nil
}

// New builds the scorer.
func New(name string, size int) *Scorer {
	return &Scorer{tn: pluginkit.TypedName(Type, name), recent: lru.New(size)}
}

// TypedName implements fwkplugin.Plugin.
func (s *Scorer) TypedName() fwkplugin.TypedName { return s.tn }

// Category is distribution.
func (s *Scorer) Category() fwksched.ScorerCategory { return fwksched.Distribution }

// cold reports whether no candidate holds any block of the prompt.
func cold(eps []fwksched.Endpoint) bool {
	for _, ep := range eps {
		if v, ok := ep.Get(attrprefix.PrefixCacheMatchInfoKey); ok {
			if m, ok := v.(*attrprefix.PrefixCacheMatchInfo); ok && m != nil && m.MatchBlocks() > 0 {
				return false
			}
		}
	}
	return true
}

// Score: warm requests 0.5 for everyone; cold ones 1.0 for endpoints never given a cold
// request, and for the others (r = recency rank among them, 0 = most recent, n of them)
// r / n, so the least recently used scores highest.
func (s *Scorer) Score(_ context.Context, _ *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	out := make(map[fwksched.Endpoint]float64, len(eps))
	if !cold(eps) {
		for _, ep := range eps {
			out[ep] = 0.5
		}
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rank := map[string]int{}
	i := 0
	for k := range s.recent.Recent() {
		rank[k] = i
		i++
	}
	n := float64(max(i, 1))
	for _, ep := range eps {
		r, used := rank[ep.GetMetadata().NamespacedName.String()]
		if !used {
			out[ep] = 1.0
			continue
		}
		out[ep] = float64(r) / n
	}
	return out
}

// PreRequest records a cold request's primary pick as the most recent cold assignment.
func (s *Scorer) PreRequest(_ context.Context, _ *fwksched.LLMRequest, result *fwksched.SchedulingResult) {
	if result == nil {
		return
	}
	primary := result.ProfileResults[result.PrimaryProfileName]
	if primary == nil || len(primary.TargetEndpoints) == 0 {
		return
	}
	ep := primary.TargetEndpoints[0]
	if v, ok := ep.Get(attrprefix.PrefixCacheMatchInfoKey); ok {
		if m, ok := v.(*attrprefix.PrefixCacheMatchInfo); ok && m != nil && m.MatchBlocks() > 0 {
			return // warm: the prefix scorer placed it
		}
	}
	k := ep.GetMetadata().NamespacedName.String()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recent.Touch(k)
}
