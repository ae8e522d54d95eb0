// Package outlenbucket is llm-d's outlen-bucket (v0.11, Alpha): before scheduling it guesses
// from the request body whether the answer will be long (thinking) or short (a tool call),
// and publishes the guess as the request attribute "outlen-bucket" for load estimators that
// weigh in-flight requests by their expected output.
//
// llm-d registers it as a request header processor and keeps request attributes on the
// request. GIE v1.5.0 has neither, so pdgate runs it as a PrepareData plugin (after the body
// is parsed, before admission and scheduling) and writes the attribute on every candidate of
// the request, the carrier pdgate's other request attributes use.
package outlenbucket

import (
	"context"
	"encoding/json"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Type is the plugin type name.
const Type = "outlen-bucket"

// AttributeKey is the request attribute written (llm-d's name).
const AttributeKey = "outlen-bucket"

// Bucket is the expected output length class.
type Bucket string

// llm-d's buckets: LONG expects 2000 output tokens or more, SHORT under 500.
const (
	Long    Bucket = "LONG"
	Short   Bucket = "SHORT"
	Unknown Bucket = "UNKNOWN"
)

// Clone implements fwkdl.Cloneable.
func (b Bucket) Clone() fwkdl.Cloneable { return b }

// String returns the bucket's name; consumers read the attribute as a fmt.Stringer.
func (b Bucket) String() string { return string(b) }

// longThinkingBudget is the thinking budget above which an answer is long.
const longThinkingBudget = 4000

// Classify applies llm-d's rules (PR #2309), first match wins:
//   - chat_template_kwargs.enable_thinking is true: LONG;
//   - thinking_budget (in chat_template_kwargs, else top-level) over 4000: LONG;
//   - tools present and thinking off (enable_thinking not true, no positive budget): SHORT;
//   - otherwise UNKNOWN.
func Classify(body *fwksched.LLMRequestBody) Bucket {
	if body == nil {
		return Unknown
	}
	var kwargs map[string]any
	if body.ChatCompletions != nil {
		kwargs = body.ChatCompletions.ChatTemplateKWArgs
	}
	if on, _ := kwargs["enable_thinking"].(bool); on {
		return Long
	}
	budget, ok := number(kwargs["thinking_budget"])
	if !ok {
		if m, isMap := body.Payload.(fwksched.PayloadMap); isMap {
			budget, _ = number(m["thinking_budget"])
		}
	}
	if budget > longThinkingBudget {
		return Long
	}
	if budget <= 0 && hasTools(body) {
		return Short
	}
	return Unknown
}

// number reads a JSON number as encoding/json decodes it, or as the original text a parser
// kept for a large value.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case json.RawMessage:
		var f float64
		if json.Unmarshal(x, &f) == nil {
			return f, true
		}
	}
	return 0, false
}

func hasTools(body *fwksched.LLMRequestBody) bool {
	if body.ChatCompletions != nil && len(body.ChatCompletions.Tools) > 0 {
		return true
	}
	if body.Responses != nil {
		if tools, ok := body.Responses.Tools.([]any); ok && len(tools) > 0 {
			return true
		}
	}
	return false
}

// Plugin is outlen-bucket.
type Plugin struct {
	tn fwkplugin.TypedName
}

var _ fwkrc.PrepareDataPlugin = (*Plugin)(nil)

// Factory builds the plugin; it takes no parameters.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	if err := pluginkit.NoParameters(Type, name, raw); err != nil {
		return nil, err
	}
	return &Plugin{tn: pluginkit.TypedName(Type, name)}, nil
}

// TypedName implements fwkplugin.Plugin.
func (p *Plugin) TypedName() fwkplugin.TypedName { return p.tn }

// Produces declares the attribute.
func (p *Plugin) Produces() map[string]any { return map[string]any{AttributeKey: Bucket("")} }

// Consumes declares nothing.
func (p *Plugin) Consumes() map[string]any { return nil }

// PrepareRequestData writes the request's bucket on every candidate.
func (p *Plugin) PrepareRequestData(_ context.Context, req *fwksched.LLMRequest, eps []fwksched.Endpoint) error {
	b := Unknown
	if req != nil {
		b = Classify(req.Body)
	}
	for _, ep := range eps {
		if ep != nil {
			ep.Put(AttributeKey, b)
		}
	}
	return nil
}

// Of returns the bucket written on an endpoint, or Unknown when none was.
func Of(ep fwksched.Endpoint) Bucket {
	if ep == nil {
		return Unknown
	}
	if v, ok := ep.Get(AttributeKey); ok {
		if b, ok := v.(Bucket); ok && b != "" {
			return b
		}
	}
	return Unknown
}
