package admission

import (
	"context"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// checkModel answers 404 (contract.ModelNotFound) for a request whose model no endpoint of
// the pool serves, before admission queues it and before any prefill leg runs. The EPP knows
// what an endpoint serves only when the endpoint declares it (the pdgate.io/served-models pod
// annotation, plus the LoRA adapters its scraped metrics report loaded or waiting); an endpoint
// that declares nothing may serve anything, so one such endpoint (or an empty pool) lets every
// model through, and the engine's own 404 reaches the client. The model checked is the one the
// endpoints will see: the target after an InferenceModelRewrite.
func (c *Controller) checkModel(ctx context.Context, reqCtx *handlers.RequestContext) *contract.Answer {
	if c.candidates == nil || reqCtx == nil {
		return nil
	}
	model := reqCtx.TargetModelName
	if model == "" {
		model = reqCtx.IncomingModelName
	}
	if model == "" {
		return nil
	}
	var md map[string]any
	if reqCtx.Request != nil {
		md = reqCtx.Request.Metadata
	}
	eps := c.candidates.Locate(ctx, md)
	if len(eps) == 0 {
		return nil
	}
	for _, ep := range eps {
		if serves, declared := endpointServes(ep, model); serves || !declared {
			return nil
		}
	}
	return contract.ModelNotFound(model)
}

func endpointServes(ep fwkdl.Endpoint, model string) (serves, declared bool) {
	if ep == nil {
		return false, false
	}
	meta := ep.GetMetadata()
	if meta == nil {
		return false, false
	}
	if serves, declared = podmodel.ServesModel(meta.Labels, model); serves || !declared {
		return serves, declared
	}
	if m := ep.GetMetrics(); m != nil {
		if _, ok := m.ActiveModels[model]; ok {
			return true, true
		}
		if _, ok := m.WaitingModels[model]; ok {
			return true, true
		}
	}
	return false, true
}
