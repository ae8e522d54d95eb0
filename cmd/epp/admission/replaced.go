package admission

import (
	"context"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkfc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/flowcontrol"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

// GateReplaced is the detector the legacy admission check reads when an admission plugin
// decides per request what the saturation gate would decide (contract.SaturationGateReplacer,
// forecast-admitter): it reports the pool unsaturated so the gate sheds nothing, and the
// plugin, which runs after it on the same request, is the one that sheds. The check keeps its
// other answers (unknown model 404, no endpoints 503) and its prefill reservations.
func GateReplaced(d fwkfc.SaturationDetector) fwkfc.SaturationDetector {
	if d == nil {
		return nil
	}
	return replacedGate{inner: d}
}

type replacedGate struct{ inner fwkfc.SaturationDetector }

// TypedName is the configured detector's (configs and logs name what the user configured).
func (r replacedGate) TypedName() fwkplugin.TypedName { return r.inner.TypedName() }

func (replacedGate) Saturation(context.Context, []fwkdl.Endpoint) float64 { return 0 }
