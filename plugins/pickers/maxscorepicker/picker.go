// Package maxscorepicker is max-score-picker: GIE v1.5.0's picker of the same type (shuffle,
// stable sort by score descending, keep the top maxNumOfEndpoints), with the random source that
// breaks ties owned by the instance and seeded from the EPP's seed when one is set
// (pluginkit.WithSeed), so a seeded run repeats its decisions.
package maxscorepicker

import (
	"context"
	"slices"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pickerkit"
)

// Type is the plugin type name (GIE's).
const Type = "max-score-picker"

// Kind is max-score-picker; Kind.New builds one on a given random source.
var Kind = pickerkit.Kind{Type: Type, Pick: pick}

// Factory builds the picker; its random source is seeded from the handle's seed, if any.
var Factory = Kind.Factory

// pick shuffles the candidates (the tie-break), sorts them by score, highest first, keeping
// the shuffled order among equal scores, and returns the first maxNumOfEndpoints.
func pick(ctx context.Context, p *pickerkit.Picker, eps []*fwksched.ScoredEndpoint) *fwksched.ProfileRunResult {
	p.LogCandidates(ctx, "Selecting endpoints from candidates sorted by max score", eps)
	p.Rand.Shuffle(eps)
	slices.SortStableFunc(eps, func(a, b *fwksched.ScoredEndpoint) int { return pickerkit.Descending(a.Score, b.Score) })
	return pickerkit.Targets(eps, p.Max)
}
