package openaiparser

import (
	"context"

	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

var _ fwkrc.PrepareDataPlugin = (*Parser)(nil)

// Produces implements fwkplugin.ProducerPlugin: the parser fills LLMRequest.TargetModel, no
// data-layer attribute.
func (p *Parser) Produces() map[string]any { return nil }

// Consumes implements fwkplugin.ConsumerPlugin.
func (p *Parser) Consumes() map[string]any { return nil }

// PrepareRequestData fills LLMRequest.TargetModel for a raw payload. GIE's director sets it
// only when it rewrites a PayloadMap's model, so with the original bytes kept it would stay
// empty and the plugins that label metrics, rate-limit or pick a tokenizer per model would see
// no model. The body's "model" is what the director would have taken as the target (raw mode
// hands a map to the director whenever the gateway asks for a rewrite). The scan skips the
// values (the body was validated when parsed), a small fraction of the parse.
func (p *Parser) PrepareRequestData(_ context.Context, request *fwksched.LLMRequest, _ []fwksched.Endpoint) error {
	if request == nil || request.TargetModel != "" || request.Body == nil {
		return nil
	}
	raw, ok := request.Body.Payload.(fwksched.RawPayload)
	if !ok {
		return nil
	}
	if model, ok := topLevelModel(raw); ok {
		request.TargetModel = model
	}
	return nil
}

// topLevelModel returns the last top-level "model" of a JSON object when it is a string.
func topLevelModel(body []byte) (string, bool) {
	s := scanner{b: body}
	model, ok := "", false
	if !s.members(func(tok []byte, plain bool) bool {
		if !keyIs(tok, plain, "model") {
			return s.skip()
		}
		v, valid := s.value()
		if !valid {
			return false
		}
		ok = v[0] == '"'
		model = ""
		if ok {
			model = unquote(v, false)
		}
		return true
	}) {
		return "", false
	}
	return model, ok
}
