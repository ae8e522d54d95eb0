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

	"github.com/pdgate/pdgate/plugins/framework/pickerkit"
)

// Type is the plugin type name (GIE's).
const Type = "random-picker"

// debug is GIE's logutil.DEBUG verbosity.
const debug = 4

// Picker picks endpoints uniformly at random.
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

// Pick shuffles the candidates and returns the first maxNumOfEndpoints.
func (p *Picker) Pick(ctx context.Context, _ *fwksched.CycleState, eps []*fwksched.ScoredEndpoint) *fwksched.ProfileRunResult {
	log.FromContext(ctx).V(debug).Info("Selecting endpoints from candidates randomly",
		"max-num-of-endpoints", p.Max, "num-of-candidates", len(eps), "scored-endpoints", eps)
	p.Rand.Shuffle(eps)
	return pickerkit.Targets(eps, p.Max)
}
