// Package aibrixprefillscorer is the GIE scorer plugin aibrix-prefill-scorer: AIBrix's prefill
// policies (plugins/aibrix/internal/prefillpolicy) turned into [0,1] scores for llm-d-style compositions.
package aibrixprefillscorer

import (
	"context"
	"encoding/json"
	"math"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/aibrix/internal/decodepolicy"
	"github.com/pdgate/pdgate/plugins/aibrix/internal/knobscorer"
	"github.com/pdgate/pdgate/plugins/aibrix/internal/prefillpolicy"
	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Type is the GIE scorer's type name.
const Type = "aibrix-prefill-scorer"

// Scorer scores prefill candidates with an AIBrix prefill policy for llm-d-style compositions.
// Inputs: the in-flight count is the engine's running + waiting requests; the prefix match is
// GIE's PrefixCacheMatchInfo (approx-prefix-cache-producer) as a percent. The std-dev skip
// gives skipped pods score 0. Lower AIBrix scores become higher GIE scores (min-max,
// decodepolicy.Normalize). token_load and hybrid_cache_load are not offered here: their charge
// must be atomic with the pick, which aibrix-pd-pair does.
type Scorer struct{ knobscorer.Base }

var _ fwksched.Scorer = (*Scorer)(nil)

// Factory builds the scorer from AIBrix knobs (plugins/lib/pdknobs parameters).
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	b, err := knobscorer.Load(handle, Type, name, raw, func(k pdknobs.Knobs) string {
		if k.PrefillScorePolicy == pdknobs.PrefillTokenLoad || k.PrefillScorePolicy == pdknobs.PrefillHybridCacheLoad {
			return "prefillScorePolicy " + k.PrefillScorePolicy
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	return &Scorer{b}, nil
}

// Consumes declares PrefixCacheMatchInfo (MatchPercent: prefix_cache, conductor and hybrid read
// it, and a profile can switch to them per request), so the EPP adds its producer.
func (s *Scorer) Consumes() map[string]any {
	return map[string]any{attrprefix.PrefixCacheMatchInfoKey: attrprefix.PrefixCacheMatchInfo{}}
}

// Category implements fwksched.Scorer.
func (s *Scorer) Category() fwksched.ScorerCategory { return fwksched.Affinity }

// MatchPercent reads GIE's prefix match attribute as a percent (0 when absent).
func MatchPercent(ep fwksched.Endpoint) float64 {
	v, ok := ep.Get(attrprefix.PrefixCacheMatchInfoKey)
	if !ok {
		return 0
	}
	info, ok := v.(*attrprefix.PrefixCacheMatchInfo)
	if !ok || info == nil || info.TotalBlocks() <= 0 {
		return 0
	}
	return math.Floor(float64(info.MatchBlocks()) * 100 / float64(info.TotalBlocks()))
}

// Score implements fwksched.Scorer.
func (s *Scorer) Score(_ context.Context, _ *fwksched.CycleState, req *fwksched.LLMRequest, eps []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	var pods []podmodel.Pod
	for _, ep := range eps {
		pods = append(pods, podmodel.FromEndpoint(ep))
	}
	k := s.KnobsFor(req, podmodel.ModelConfigOf(pods))
	prompt := ""
	if req != nil && req.Body != nil {
		prompt = podmodel.PromptText(req.Body)
	}
	counts := make([]float64, len(eps))
	maxCount := 1.0
	for i, ep := range eps {
		if m := engineattr.Get(ep); m != nil {
			counts[i] = m.Running + m.Waiting
		}
		maxCount = math.Max(maxCount, counts[i])
	}
	keep := prefillpolicy.StdDevSkip(counts, float64(k.PrefixCacheStandardDeviationFactor))
	raw := make([]float64, len(eps))
	for i, ep := range eps {
		if !keep[i] {
			raw[i] = math.NaN()
			continue
		}
		c := prefillpolicy.Candidate{Key: pods[i].Key, Count: counts[i], MatchPct: MatchPercent(ep), Metrics: engineattr.Get(ep)}
		raw[i] = prefillpolicy.Score(k.PrefillScorePolicy, c, maxCount, prefillpolicy.Tokens(prompt), k)
	}
	return decodepolicy.NormalizeFor(eps, raw)
}
