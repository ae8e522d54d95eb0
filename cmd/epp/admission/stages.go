package admission

import (
	"context"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"

	"github.com/pdgate/pdgate/plugins/deciders/alwaysdisagg"
	"github.com/pdgate/pdgate/plugins/deciders/prefixdecider"
)

// Request stages: a request the P/D decider will keep decode-only needs a decode
// slot and nothing else, so shedding it because the prefill tier is saturated rejects work
// the decode tier can serve. The legacy admission check therefore measures each request on
// the stages it needs: a decode-only request on the decode tier's saturation, any other on
// the larger of the two tiers'.
//
// At admission the scheduler has not run, so "decode-only" is what the configured
// prefix-based-pd-decider decides for a prompt shorter than its nonCachedTokens whatever the
// cache holds (the uncached suffix is never longer than the prompt). A longer prompt with a
// cache hit is counted as needing a prefill: conservative. With an always-disagg decider in
// the config, or no prefix-based decider, every request needs both stages (the pool-level
// rule, unchanged).

// Stages classifies requests by the P/D stages they need.
type Stages struct {
	// threshold is the prefix-based decider's nonCachedTokens: prompts below it stay
	// decode-only. 0 with disabled set means the decider never disaggregates.
	threshold int
	disabled  bool
}

// StagesFromPlugins reads the classification from the configured plugins; nil when every
// request needs both stages (no prefix-based decider, an always-disagg decider, or two
// prefix-based deciders with different thresholds).
func StagesFromPlugins(pls []fwkplugin.Plugin) *Stages {
	var s *Stages
	for _, p := range pls {
		switch d := p.(type) {
		case *prefixdecider.Decider:
			n := d.Params().NonCachedTokens
			next := &Stages{threshold: n, disabled: n == 0}
			if s != nil && *s != *next {
				return nil
			}
			s = next
		default:
			if p.TypedName().Type == alwaysdisagg.PDType {
				return nil
			}
		}
	}
	return s
}

// DecodeOnly reports whether the request will need no prefill leg.
func (s *Stages) DecodeOnly(req *fwksched.LLMRequest) bool {
	if s == nil || req == nil {
		return false
	}
	if s.disabled {
		return true
	}
	n, err := prefixdecider.PromptTokenCount(req)
	return err == nil && n < s.threshold
}

type decodeOnlyKey struct{}

// withRequest lets the detector classify the request, lazily: GIE's legacy check measures
// saturation only for sheddable requests.
func (s *Stages) withRequest(ctx context.Context, reqCtx *handlers.RequestContext) context.Context {
	if s == nil || reqCtx == nil || reqCtx.SchedulingRequest == nil {
		return ctx
	}
	req := reqCtx.SchedulingRequest
	return context.WithValue(ctx, decodeOnlyKey{}, func() bool { return s.DecodeOnly(req) })
}

// decodeOnly reports whether ctx carries a request classified decode-only.
func decodeOnly(ctx context.Context) bool {
	f, ok := ctx.Value(decodeOnlyKey{}).(func() bool)
	return ok && f()
}
