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
	"math"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pickerkit"
)

// Type is the plugin type name (GIE's).
const Type = "weighted-random-picker"

// Kind is weighted-random-picker; Kind.New builds one on a given random source.
var Kind = pickerkit.Kind{Type: Type, Pick: pick}

// Factory builds the picker; its random source is seeded from the handle's seed, if any.
var Factory = Kind.Factory

// debug is GIE's logutil.DEBUG verbosity.
const debug = 4

type keyed struct {
	ep  *fwksched.ScoredEndpoint
	key float64
}

// pick draws U in (0,1) for every candidate with a positive score, keys it U^(1/score) and
// returns the maxNumOfEndpoints largest keys (candidates scoring ≤ 0 key 0, so they come last);
// when no score is positive it returns random-picker's uniform choice.
func pick(ctx context.Context, p *pickerkit.Picker, eps []*fwksched.ScoredEndpoint) *fwksched.ProfileRunResult {
	if !slices.ContainsFunc(eps, func(e *fwksched.ScoredEndpoint) bool { return e.Score > 0 }) {
		log.FromContext(ctx).V(debug).Info("All scores are zero, delegating to RandomPicker for uniform selection")
		return pickerkit.Uniform(ctx, p, eps)
	}
	p.LogCandidates(ctx, "Selecting endpoints from candidates by random weighted picker", eps)
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
	slices.SortStableFunc(ks, func(a, b keyed) int { return pickerkit.Descending(a.key, b.key) })
	for i, k := range ks {
		eps[i] = k.ep
	}
	return pickerkit.Targets(eps, p.Max)
}
