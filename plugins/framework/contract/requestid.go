package contract

import (
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// RequestID is the id a response hook keys its per-request state by: the request's, or the
// response's when the request carries none (GIE fills one or the other depending on the hook).
func RequestID(req *fwksched.LLMRequest, resp *fwkrc.Response) string {
	if req != nil && req.RequestId != "" {
		return req.RequestId
	}
	if resp != nil {
		return resp.RequestId
	}
	return ""
}
