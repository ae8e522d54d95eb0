// Package weightedrandompicker is weighted-random-picker: GIE v1.5.0's picker of the same type
// (weighted sampling without replacement by A-Res, key = U^(1/score), the maxNumOfEndpoints
// largest keys win; all scores ≤ 0: a uniform random choice), with the random source owned by
// the instance and seeded from the EPP's seed when one is set (pluginkit.WithSeed).
//
// Reference: Efraimidis and Spirakis, weighted random sampling,
// https://utopia.duth.gr/~pefraimi/research/data/2007EncOfAlg.pdf.
package weightedrandompicker

import (
	"context"
	"encoding/json"
	"math"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pickerkit"
)

// Type is the plugin type name (GIE's).
const Type = "weighted-random-picker"

// debug is GIE's logutil.DEBUG verbosity.
const debug = 4

// Picker picks endpoints at random with probability derived from their scores.
type Picker struct {
	pickerkit.Base
}

var _ fwksched.Picker = (*Picker)(nil)

// Factory builds the picker; its random source is seeded from the handle's seed, if any.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return pickerkit.Build(Type, name, raw, handle, New)
}

// New builds a picker returning at most maxNumOfEndpoints endpoints (≤ 0: 1) that draws from
// rnd (nil: time-seeded).
func New(name string, maxNumOfEndpoints int, rnd *pickerkit.Rand) *Picker {
	return &Picker{Base: pickerkit.NewBase(Type, name, maxNumOfEndpoints, rnd)}
}

type keyed struct {
	ep  *fwksched.ScoredEndpoint
	key float64
}

// Pick draws U in (0,1) for every candidate with a positive score, keys it U^(1/score) and
// returns the maxNumOfEndpoints largest keys (candidates scoring ≤ 0 key 0, so they come last);
// when no score is positive it returns a uniform random choice.
func (p *Picker) Pick(ctx context.Context, _ *fwksched.CycleState, eps []*fwksched.ScoredEndpoint) *fwksched.ProfileRunResult {
	logger := log.FromContext(ctx).V(debug)
	if !slices.ContainsFunc(eps, func(e *fwksched.ScoredEndpoint) bool { return e.Score > 0 }) {
		logger.Info("All scores are zero, delegating to RandomPicker for uniform selection")
		p.Rand.Shuffle(eps)
		return pickerkit.Targets(eps, p.Max)
	}
	logger.Info("Selecting endpoints from candidates by random weighted picker",
		"max-num-of-endpoints", p.Max, "num-of-candidates", len(eps), "scored-endpoints", eps)
	if p.Rand.Seeded() {
		pickerkit.Canonical(eps) // the draws follow the candidates' order
	}
	u := make([]float64, len(eps))
	p.Rand.Floats(u)
	ks := make([]keyed, len(eps))
	for i, e := range eps {
		ks[i].ep = e
		if e.Score <= 0 {
			continue
		}
		if u[i] == 0 {
			u[i] = 1e-10 // avoid log(0), as GIE
		}
		ks[i].key = math.Pow(u[i], 1/e.Score)
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		switch {
		case a.key > b.key:
			return -1
		case a.key < b.key:
			return 1
		}
		return 0
	})
	n := min(p.Max, len(ks))
	out := make([]fwksched.Endpoint, n)
	for i := range n {
		out[i] = ks[i].ep
	}
	return &fwksched.ProfileRunResult{TargetEndpoints: out}
}
