package disaggprofile

import (
	"fmt"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/tokenestimate"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// combinedPod reports whether the decode pick runs prefill itself, as resolved by podmodel
// (the one place pdgate decides what a pod is): llm-d roles prefill-decode, both and
// encode-prefill-decode, and AIBrix pods whose model.aibrix.ai/config profile says
// combined: true.
func (h *Handler) combinedPod(request *fwksched.LLMRequest, ep fwksched.Endpoint) (string, bool) {
	pod := h.pods.FromEndpoint(h.log, ep)
	var headers map[string]string
	if request != nil {
		headers = request.Headers
	}
	hints := podmodel.AutoHints{MaxTokens: -1}
	if pod.Config != nil {
		hints = autoHints(request)
	}
	if !pod.IsCombined(protocol.HeaderValue(headers, protocol.HeaderConfigProfile), hints) {
		return "", false
	}
	if pod.RoleSource == podmodel.SourceLLMD {
		return fmt.Sprintf("decode pick %s has combined role %q and prefills locally", endpointName(ep), pod.RawRole), true
	}
	return fmt.Sprintf("decode pick %s is a combined pod (model.aibrix.ai/config combined) and prefills locally", endpointName(ep)), true
}

// autoHints are the request facts AIBrix's config-profile: auto selection reads.
func autoHints(request *fwksched.LLMRequest) podmodel.AutoHints {
	h := podmodel.AutoHints{MaxTokens: -1}
	if request == nil {
		return h
	}
	if request.TokenizedPrompt != nil {
		h.PromptTokens = len(request.TokenizedPrompt.TokenIDs)
	} else if tp := tokenestimate.Estimate(request, tokenestimate.EstimateParams{}); tp != nil {
		h.PromptTokens = len(tp.TokenIDs)
	}
	if request.Body != nil {
		if m, ok := request.Body.Payload.(fwksched.PayloadMap); ok {
			for _, k := range []string{"max_tokens", "max_completion_tokens"} {
				if f, ok := m[k].(float64); ok && f >= 0 {
					h.MaxTokens = int(f)
					break
				}
			}
		}
	}
	return h
}
