// Package randompicker is random-picker: GIE v1.5.0's picker of the same type (a uniform
// random choice of maxNumOfEndpoints candidates, scores ignored), with the random source owned
// by the instance and seeded from the EPP's seed when one is set (pluginkit.WithSeed).
package randompicker

import (
	"context"
	"encoding/json"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/pickerkit"
)

// Type is the plugin type name (GIE's).
const Type = "random-picker"

// debug is GIE's logutil.DEBUG verbosity.
const debug = 4

// Picker picks endpoints uniformly at random.
type Picker struct {
	tn  fwkplugin.TypedName
	max int
	rnd *pickerkit.Rand
}

var _ fwksched.Picker = (*Picker)(nil)

// Factory builds the picker; its random source is seeded from the handle's seed, if any.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p, err := pickerkit.ParseParameters(Type, name, raw)
	if err != nil {
		return nil, err
	}
	return New(name, p.MaxNumOfEndpoints, pickerkit.RandFor(handle, name)), nil
}

// New builds a picker returning at most maxNumOfEndpoints endpoints (≤ 0: 1) that draws from
// rnd (nil: time-seeded).
func New(name string, maxNumOfEndpoints int, rnd *pickerkit.Rand) *Picker {
	if rnd == nil {
		rnd = pickerkit.NewRand(0, false)
	}
	return &Picker{tn: fwkplugin.TypedName{Type: Type, Name: name}, max: pickerkit.Max(maxNumOfEndpoints), rnd: rnd}
}

// TypedName implements fwkplugin.Plugin.
func (p *Picker) TypedName() fwkplugin.TypedName { return p.tn }

// Pick shuffles the candidates and returns the first maxNumOfEndpoints.
func (p *Picker) Pick(ctx context.Context, _ *fwksched.CycleState, eps []*fwksched.ScoredEndpoint) *fwksched.ProfileRunResult {
	log.FromContext(ctx).V(debug).Info("Selecting endpoints from candidates randomly",
		"max-num-of-endpoints", p.max, "num-of-candidates", len(eps), "scored-endpoints", eps)
	p.rnd.Shuffle(eps)
	return pickerkit.Targets(eps, p.max)
}
