package admission

import (
	"context"
	"sync"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"

	"github.com/pdgate/pdgate/plugins/framework/contract"
)

// Request stages: a request the P/D decider will keep decode-only needs a decode
// slot and nothing else, so shedding it because the prefill tier is saturated rejects work
// the decode tier can serve. The legacy admission check therefore measures each request on
// the stages it needs: a decode-only request on the decode tier's saturation, any other on
// the larger of the two tiers'.
//
// At admission the scheduler has not run, so the deciders say what they know before any pod
// is picked (contract.StageClassifier): prefix-based-pd-decider keeps a prompt shorter than
// its nonCachedTokens decode-only whatever the cache holds; always-disagg-pd-decider never
// does. A request is decode-only when every configured classifier says so; with none, every
// request needs both stages (the pool-level rule, unchanged).

// Stages classifies requests by the P/D stages they need.
type Stages struct {
	classifiers []contract.StageClassifier
}

// StagesFromPlugins reads the classification from the configured plugins; nil when none
// classifies requests (every request needs both stages).
func StagesFromPlugins(pls []fwkplugin.Plugin) *Stages {
	cs := contract.StageClassifiers(pls)
	if len(cs) == 0 {
		return nil
	}
	return &Stages{classifiers: cs}
}

// DecodeOnly reports whether the request will need no prefill leg.
func (s *Stages) DecodeOnly(req *fwksched.LLMRequest) bool {
	return s != nil && contract.DecodeOnlyAtAdmission(s.classifiers, req)
}

type decodeOnlyKey struct{}

// requestStage classifies one request at most once: admission's reservation and the detector
// (for a sheddable request) both ask, and a classification may estimate the whole prompt.
type requestStage struct {
	stages     *Stages
	req        *fwksched.LLMRequest
	once       sync.Once
	decodeOnly bool
}

func (r *requestStage) DecodeOnly() bool {
	r.once.Do(func() { r.decodeOnly = r.stages.DecodeOnly(r.req) })
	return r.decodeOnly
}

// withRequest lets the detector classify the request, lazily: GIE's legacy check measures
// saturation only for sheddable requests. The returned stage is the same classification, for
// the caller's own use (nil when there is nothing to classify).
func (s *Stages) withRequest(ctx context.Context, reqCtx *handlers.RequestContext) (context.Context, *requestStage) {
	if s == nil || reqCtx == nil || reqCtx.SchedulingRequest == nil {
		return ctx, nil
	}
	rs := &requestStage{stages: s, req: reqCtx.SchedulingRequest}
	return context.WithValue(ctx, decodeOnlyKey{}, rs), rs
}

// decodeOnly reports whether ctx carries a request classified decode-only.
func decodeOnly(ctx context.Context) bool {
	rs, ok := ctx.Value(decodeOnlyKey{}).(*requestStage)
	return ok && rs.DecodeOnly()
}
