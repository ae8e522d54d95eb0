package pdratioadvisor

import (
	"context"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/tokenestimate"
)

// RefusedForCapacity implements contract.DemandObserver: a request admission refused for want
// of capacity (forecast-admitter's 429, the saturation gate's shedding) is demand the pool did
// not serve. It counts as an arrival with its prompt, as a scheduled request does at PreRequest,
// so that shedding an overload does not hide it: sized on the admitted requests alone, a
// prefill tier that sheds half its prompts would look as large as it needs to be. Its prompt is
// taken as a prefill leg's unless every decider keeps the request on its decode pod, or the
// pool has no prefill pod.
func (a *Plugin) RefusedForCapacity(_ context.Context, req *fwksched.LLMRequest) {
	if req == nil {
		return
	}
	prompt := float64(tokenestimate.MinTokens(req))
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.win.at(a.now())
	b.arrivals++
	if a.current[RolePrefill] > 0 && !a.decodeOnly(req) {
		b.remotePrompt += prompt
	} else {
		b.localPrompt += prompt
	}
}

// decodeOnly: every configured P/D decider keeps the request on its decode pod whatever the
// pick (a.mu held).
func (a *Plugin) decodeOnly(req *fwksched.LLMRequest) bool {
	return contract.DecodeOnlyAtAdmission(a.stages, req)
}
