package contract

import (
	"context"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// DemandObserver is implemented by plugins that size the pool for the demand it receives
// (pd-ratio-advisor). A request that admission refuses for want of capacity reaches no later
// hook, so without being told of it such a plugin sees only the demand the pool already
// serves, and shedding an overload would hide the overload from the sizing that must answer it.
type DemandObserver interface {
	// RefusedForCapacity is told of a request that admission refused before scheduling with a
	// 429 or a 503 (shed, saturated, no endpoint). It runs on the request path: it must be
	// quick and must not block.
	RefusedForCapacity(ctx context.Context, req *fwksched.LLMRequest)
}

// DemandObservers returns the plugins that observe refused demand, in order.
func DemandObservers(plugins []fwkplugin.Plugin) []DemandObserver {
	return implementing[DemandObserver](plugins)
}
