// Package aibrixdecodescorer is the GIE scorer plugin aibrix-decode-scorer: AIBrix's decode policies
// (plugins/aibrix/internal/decodepolicy) turned into [0,1] scores for llm-d-style compositions.
package aibrixdecodescorer

import (
	"context"
	"encoding/json"
	"math"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/aibrix/internal/decodepolicy"
	"github.com/pdgate/pdgate/plugins/aibrix/internal/knobscorer"
	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Type is the GIE scorer's type name.
const Type = "aibrix-decode-scorer"

// Scorer scores decode candidates with an AIBrix decode policy for llm-d-style compositions
// (a decode profile with a max-score picker). Lower AIBrix scores become higher GIE scores
// (Normalize). The running count is the engine's running requests; pods without the metric get
// the cold-start score. token_load is not offered here: its charge must be atomic with the
// pick, which aibrix-pd-pair does.
type Scorer struct{ knobscorer.Base }

var _ fwksched.Scorer = (*Scorer)(nil)

// Factory builds the scorer from AIBrix knobs (plugins/lib/pdknobs parameters).
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	b, err := knobscorer.Load(handle, Type, name, raw, func(k pdknobs.Knobs) string {
		if k.DecodeScorePolicy == pdknobs.DecodeTokenLoad {
			return "decodeScorePolicy token_load"
		}
		return ""
	})
	if err != nil {
		return nil, err
	}
	return &Scorer{b}, nil
}

// Category implements fwksched.Scorer.
func (s *Scorer) Category() fwksched.ScorerCategory { return fwksched.Distribution }

// Score implements fwksched.Scorer.
func (s *Scorer) Score(_ context.Context, _ *fwksched.CycleState, req *fwksched.LLMRequest, eps []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	k := s.KnobsFor(req, podmodel.ModelConfigOfEndpoints(eps))
	cands := make([]decodepolicy.Candidate, len(eps))
	for i, ep := range eps {
		cands[i] = decodepolicy.NewCandidate(podmodel.FromEndpoint(ep).Key, engineattr.Get(ep), 0)
	}
	results, _ := decodepolicy.ScoreAll(k.DecodeScorePolicy, cands, k)
	raw := make([]float64, len(eps))
	for i := range raw {
		raw[i] = math.NaN()
	}
	for _, r := range results {
		raw[r.Index] = r.Score
	}
	return decodepolicy.NormalizeFor(eps, raw)
}
