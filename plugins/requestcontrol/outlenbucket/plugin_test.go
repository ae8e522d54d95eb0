package outlenbucket

import (
	"context"
	"encoding/json"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func chat(kwargs map[string]any, tools ...any) *fwksched.LLMRequestBody {
	return &fwksched.LLMRequestBody{ChatCompletions: &fwksched.ChatCompletionsRequest{ChatTemplateKWArgs: kwargs, Tools: tools}}
}

func TestClassify(t *testing.T) {
	tool := map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}
	withTop := func(b *fwksched.LLMRequestBody, p fwksched.RequestPayload) *fwksched.LLMRequestBody {
		b.Payload = p
		return b
	}
	tests := []struct {
		name string
		body *fwksched.LLMRequestBody
		want Bucket
	}{
		{"no body", nil, Unknown},
		{"plain chat", chat(nil), Unknown},
		{"enable_thinking", chat(map[string]any{"enable_thinking": true}), Long},
		{"enable_thinking wins over tools", chat(map[string]any{"enable_thinking": true}, tool), Long},
		{"enable_thinking false, no tools", chat(map[string]any{"enable_thinking": false}), Unknown},
		{"enable_thinking as a string is not true", chat(map[string]any{"enable_thinking": "true"}), Unknown},
		{"budget over 4000", chat(map[string]any{"thinking_budget": 4001.0}), Long},
		{"budget of exactly 4000", chat(map[string]any{"thinking_budget": 4000.0}), Unknown},
		{"budget over 4000 with tools", chat(map[string]any{"thinking_budget": 8192.0}, tool), Long},
		{"top-level budget", withTop(chat(nil), fwksched.PayloadMap{"thinking_budget": 6000.0}), Long},
		{"top-level budget kept as raw JSON", withTop(chat(nil), fwksched.PayloadMap{"thinking_budget": json.RawMessage("6000")}), Long},
		{"kwargs budget read before the top level", withTop(chat(map[string]any{"thinking_budget": 100.0}), fwksched.PayloadMap{"thinking_budget": 6000.0}), Unknown},
		{"tools, thinking off", chat(nil, tool), Short},
		{"tools, enable_thinking false", chat(map[string]any{"enable_thinking": false}, tool), Short},
		{"tools with a small budget: thinking on", chat(map[string]any{"thinking_budget": 1000.0}, tool), Unknown},
		{"tools with a zero budget", chat(map[string]any{"thinking_budget": 0.0}, tool), Short},
		{"responses API tools", &fwksched.LLMRequestBody{Responses: &fwksched.ResponsesRequest{Input: "hi", Tools: []any{tool}}}, Short},
		{"responses API, empty tools", &fwksched.LLMRequestBody{Responses: &fwksched.ResponsesRequest{Input: "hi", Tools: []any{}}}, Unknown},
		{"completions", &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{}}, Unknown},
		{"raw payload: the top level is not read", withTop(chat(nil), fwksched.RawPayload(`{"thinking_budget":6000}`)), Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Classify(tt.body); got != tt.want {
				t.Fatalf("Classify = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestPrepareRequestDataWritesEveryCandidate(t *testing.T) {
	p, err := Factory("ob", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a := eptest.Scheduling(eptest.Spec{Name: "a", NoMetrics: true})
	b := eptest.Scheduling(eptest.Spec{Name: "b", NoMetrics: true})
	if Of(a) != Unknown || Of(nil) != Unknown {
		t.Fatal("an endpoint without the attribute must read UNKNOWN")
	}
	req := &fwksched.LLMRequest{Body: chat(map[string]any{"enable_thinking": true})}
	if err := p.(*Plugin).PrepareRequestData(context.Background(), req, []fwksched.Endpoint{a, nil, b}); err != nil {
		t.Fatal(err)
	}
	for _, ep := range []fwksched.Endpoint{a, b} {
		if got := Of(ep); got != Long {
			t.Errorf("%s: %s, want LONG", ep.GetMetadata().NamespacedName.Name, got)
		}
		if v, _ := ep.Get(AttributeKey); v.(interface{ String() string }).String() != "LONG" {
			t.Errorf("the attribute must read as a fmt.Stringer: %#v", v)
		}
	}
	if err := p.(*Plugin).PrepareRequestData(context.Background(), nil, []fwksched.Endpoint{a}); err != nil || Of(a) != Unknown {
		t.Fatalf("no request: %v %s, want UNKNOWN", err, Of(a))
	}
	if _, ok := p.(*Plugin).Produces()[AttributeKey]; !ok {
		t.Fatal("Produces must declare the attribute")
	}
}

func TestParameters(t *testing.T) {
	for _, tt := range []struct{ name, params, wantErr string }{
		{"none", ``, ""},
		{"empty", `{}`, ""},
		{"any field", `{"longThreshold":2000}`, "takes no parameters"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Factory("ob", json.RawMessage(tt.params), nil)
			plugintest.WantErr(t, err, tt.wantErr, Type, `"ob"`, "longThreshold")
		})
	}
}
