package disaggprofile

import (
	"context"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/protocol"
)

// ConditionalDecodeMessage is llm-d's 412 message for a conditional-decode miss.
const ConditionalDecodeMessage = protocol.ConditionalDecodeMessage

// HeaderConditionalDecodeChecked marks (on the request, never upstream: the EPP drops internal
// headers) that the profile handler already ran the conditional-decode gate at scheduling
// time, so the gate's own PreRequest does not run it again.
const HeaderConditionalDecodeChecked = protocol.InternalHeaderPrefix + "conditional-decode-checked"

// ConditionalDecodeGate is the conditional-decode (Prefer: if-available) gate as the profile
// handlers see it; prefix-based-pd-decider implements it. Only the first configured instance
// reports IsConditionalDecodeGate.
type ConditionalDecodeGate interface {
	fwkplugin.Plugin
	IsConditionalDecodeGate() bool
	// CheckConditionalDecode decides for the decode pick, records the outcome metric and log,
	// and reports whether the request must be answered 412.
	CheckConditionalDecode(ctx context.Context, request *fwksched.LLMRequest, decodeEndpoint fwksched.Endpoint) bool
}

// findGate returns the configured gate, if any.
func findGate(handle fwkplugin.Handle) ConditionalDecodeGate {
	if handle == nil {
		return nil
	}
	for _, p := range handle.GetAllPlugins() {
		if g, ok := p.(ConditionalDecodeGate); ok && g.IsConditionalDecodeGate() {
			return g
		}
	}
	return nil
}

// gateAtScheduling runs the conditional-decode gate once decode is picked, before any
// PreRequest plugin: a rejected request then leaves no trace (GIE's prefix index is not told
// the decode pod holds a prompt it never received, no load is charged). The error carries a
// 412 status marker that the EPP's ext_proc server turns into the HTTP status.
func gateAtScheduling(ctx context.Context, gate ConditionalDecodeGate, request *fwksched.LLMRequest, decode fwksched.Endpoint) error {
	if gate == nil || request == nil || !protocol.IsConditionalDecode(headerFold(request.Headers, protocol.HeaderPrefer)) {
		return nil
	}
	if request.Headers == nil {
		request.Headers = map[string]string{}
	}
	request.Headers[HeaderConditionalDecodeChecked] = "true"
	if gate.CheckConditionalDecode(ctx, request, decode) {
		return protocol.StatusError(412, ConditionalDecodeMessage)
	}
	return nil
}
