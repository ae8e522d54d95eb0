// Package softreflectiveceiling is llm-d's soft-reflective-ceiling-policy, a flow-control
// usage-limit policy: as pool saturation rises, lower-priority bands are gated first and
// progressively, while the highest-priority band runs until the pool is saturated. Gated
// requests stay queued (the ceiling controls dispatch, not admission). Reference it from
// flowControl.usageLimitPolicyPluginRef with the flowControl feature gate on; the saturation it
// sees is the EPP's stage-aware value (max of the prefill and decode tiers).
package softreflectiveceiling

import (
	"context"
	"encoding/json"
	"math"
	"sync/atomic"

	fwkfc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/flowcontrol"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Type is the plugin type name.
const Type = "soft-reflective-ceiling-policy"

// Policy is soft-reflective-ceiling-policy.
type Policy struct {
	tn   fwkplugin.TypedName
	tick atomic.Uint64
}

var _ fwkfc.UsageLimitPolicy = (*Policy)(nil)

// Factory builds the policy. It takes no parameters: an empty object or none is fine, any key
// is an error (llm-d decodes strictly into an empty struct).
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	if err := pluginkit.NoParameters(Type, name, raw); err != nil {
		return nil, err
	}
	return New(name), nil
}

// New builds the policy.
func New(name string) *Policy {
	if name == "" {
		name = Type
	}
	return &Policy{tn: fwkplugin.TypedName{Type: Type, Name: name}}
}

// TypedName implements fwkplugin.Plugin.
func (p *Policy) TypedName() fwkplugin.TypedName { return p.tn }

// ComputeLimit returns one ceiling per active priority (highest first). With N bands and
// saturation s: band 0 (the highest) always gets 1.0; band i ≥ 1 is open (1.0) while
// s < 1 − i·s/(N−1); past that it is closed (0.0) at s ≥ 1 and otherwise alternates, open
// on one call in round(s/(1−s)), so lower bands get about (1−s)/s of the dispatch cycles.
// The alternation counter advances once per call while 0.5 ≤ s < 1 and is shared by all
// bands of a call, as in llm-d.
func (p *Policy) ComputeLimit(_ context.Context, s float64, priorities []int) []float64 {
	n := len(priorities)
	out := make([]float64, n)
	for i := range out {
		out[i] = 1.0
	}
	if n <= 1 {
		return out
	}
	var tick uint64
	if s >= 0.5 && s < 1 {
		tick = p.tick.Add(1) - 1
	}
	period := uint64(1)
	if s < 1 {
		period = uint64(max(1, math.Round(s/(1-s))))
	}
	for i := 1; i < n; i++ {
		r := 1 - float64(i)*s/float64(n-1)
		switch {
		case s < r:
			out[i] = 1.0
		case s >= 1:
			out[i] = 0.0
		case tick%period == 0:
			out[i] = 1.0
		default:
			out[i] = 0.0
		}
	}
	return out
}
