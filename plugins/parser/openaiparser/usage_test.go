package openaiparser

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	fwkrh "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requesthandling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/openai"
)

var sse = map[string]string{"content-type": "text/event-stream"}

// responseCases are response bodies on which GIE's openai-parser does not panic; the parser
// must read each exactly as GIE's does.
var responseCases = []struct {
	name, body string
	headers    map[string]string
}{
	{name: "chat", body: `{"object":"chat.completion","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`},
	{name: "chat with choices", body: `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi \"there\" \u00e9"},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"total_tokens":20,"completion_tokens":8,"prompt_tokens_details":{"cached_tokens":4}}}`},
	{name: "cached tokens, GIE's key", body: `{"object":"text_completion","usage":{"prompt_tokens":9,"prompt_token_details":{"cached_tokens":6,"x":[1]}}}`},
	{name: "details without cached tokens", body: `{"object":"chat.completion","usage":{"prompt_tokens":9,"prompt_token_details":{"audio":1}}}`},
	{name: "details null", body: `{"object":"chat.completion","usage":{"prompt_tokens":9,"prompt_token_details":null}}`},
	{name: "chunk", body: `{"object":"chat.completion.chunk","usage":{"prompt_tokens":1,"completion_tokens":2,"input_tokens":50}}`},
	{name: "responses API", body: `{"object":"response","usage":{"input_tokens":5,"output_tokens":6,"total_tokens":11,"prompt_tokens":99}}`},
	{name: "conversation item", body: `{"object":"conversation.item","usage":{"input_tokens":5,"output_tokens":6}}`},
	{name: "unknown object: input wins", body: `{"object":"other","usage":{"input_tokens":5,"prompt_tokens":7,"completion_tokens":8}}`},
	{name: "no object", body: `{"usage":{"prompt_tokens":7,"output_tokens":2}}`},
	{name: "object not a string", body: `{"object":5,"usage":{"prompt_tokens":7,"completion_tokens":8}}`},
	{name: "object after usage", body: `{"usage":{"input_tokens":5,"prompt_tokens":7},"object":"chat.completion"}`},
	{name: "last object wins", body: `{"object":"response","usage":{"input_tokens":5,"prompt_tokens":7},"object":"chat.completion"}`},
	{name: "last usage wins", body: `{"object":"chat.completion","usage":{"prompt_tokens":1},"usage":{"completion_tokens":2}}`},
	{name: "usage null last", body: `{"object":"chat.completion","usage":{"prompt_tokens":1},"usage":null}`},
	{name: "last count wins", body: `{"object":"chat.completion","usage":{"prompt_tokens":1,"prompt_tokens":3}}`},
	{name: "null count", body: `{"object":"chat.completion","usage":{"prompt_tokens":null,"total_tokens":2}}`},
	{name: "escaped keys", body: `{"obj\u0065ct":"chat.completion","us\u0061ge":{"prompt_t\u006fkens":4,"Prompt_tokens":9}}`},
	{name: "case matters", body: `{"object":"chat.completion","Usage":{"prompt_tokens":4}}`},
	{name: "fractions and exponents", body: `{"object":"chat.completion","usage":{"prompt_tokens":3.9,"completion_tokens":-2.5,"total_tokens":1e3}}`},
	{name: "empty usage", body: `{"object":"chat.completion","usage":{}}`},
	{name: "no usage", body: `{"object":"chat.completion","choices":[]}`},
	{name: "spaces", body: " \n{ \"object\" : \"chat.completion\" , \"usage\" : { \"prompt_tokens\" : 2 } } \n"},
	{name: "empty object", body: `{}`},
	{name: "null body", body: `null`},
	{name: "array", body: `[]`},
	{name: "string", body: `"x"`},
	{name: "syntax error", body: `{"usage":{"prompt_tokens":1}`},
	{name: "trailing text", body: `{"usage":{"prompt_tokens":1}} x`},
	{name: "bad literal", body: `{"usage":{"prompt_tokens":tru}}`},
	{name: "empty", body: ``},
	{name: "sse", headers: map[string]string{"content-type": "text/event-stream"}, body: "data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2,\"total_tokens\":3}}\n\ndata: [DONE]\n"},
	{name: "sse, other case", headers: map[string]string{"Content-Type": "Text/Event-Stream; charset=utf-8"}, body: "data: {\"usage\":{\"prompt_tokens\":1}}\n\n"},
	{name: "sse token chunk", headers: sse, body: "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word \\\"q\\\" \\u00e9\"},\"finish_reason\":null}]}\n\n"},
	{name: "sse token chunks, CRLF", headers: sse, body: "data: {\"choices\":[]}\r\n\r\ndata: {\"choices\":[{\"delta\":{}}]} \r\n"},
	{name: "sse usage after tokens", headers: sse, body: "data: {\"choices\":[]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n"},
	{name: "sse usage, folded key", headers: sse, body: "data: {\"USAGE\":{\"prompt_tokens\":4}}\n"},
	{name: "sse usage, long s", headers: sse, body: "data: {\"u\u017fage\":{\"prompt_tokens\":4}}\n"},
	{name: "sse usage, raw long s", headers: sse, body: "data: {\"uſage\":{\"prompt_tokens\":4}}\n"},
	{name: "sse usage, escaped key", headers: sse, body: "data: {\"us\\u0061ge\":{\"prompt_tokens\":4}}\n"},
	{name: "sse usage null", headers: sse, body: "data: {\"usage\":null}\n"},
	{name: "sse responses API", headers: sse, body: "data: {\"type\":\"response.completed\",\"response\":{\"object\":\"response\",\"usage\":{\"input_tokens\":3,\"output_tokens\":5}}}\n"},
	{name: "sse response before type", headers: sse, body: "data: {\"response\":{\"usage\":{\"input_tokens\":3}}}\ndata: {\"Type\":\"response.completed\"}\n"},
	{name: "sse not an object", headers: sse, body: "data: [1,2]\ndata: 5\ndata: {\"choices\":[]\n"},
	{name: "sse other lines", headers: sse, body: "event: x\n: comment\ndata:{\"usage\":{\"prompt_tokens\":1}}\nid: 3\n"},
	{name: "sse trailing text", headers: sse, body: "data: {\"choices\":[]} x\n"},
	{name: "json content type", headers: map[string]string{"content-type": "application/json"}, body: `{"object":"chat.completion","usage":{"prompt_tokens":1}}`},
}

// TestParseResponseMatchesGIE: every case reads as GIE's openai-parser reads it, usage and
// error alike.
func TestParseResponseMatchesGIE(t *testing.T) {
	stock := openai.NewOpenAIParser()
	fast := New("", Params{})
	for _, tt := range responseCases {
		t.Run(tt.name, func(t *testing.T) {
			want, werr := stock.ParseResponse(context.Background(), []byte(tt.body), tt.headers, true)
			got, gerr := fast.ParseResponse(context.Background(), []byte(tt.body), tt.headers, true)
			if !reflect.DeepEqual(want, got) || (werr == nil) != (gerr == nil) {
				t.Fatalf("stock %+v %v, fast %+v %v", want, werr, got, gerr)
			}
			if werr != nil && werr.Error() != gerr.Error() {
				t.Fatalf("error %q, GIE's %q", gerr, werr)
			}
		})
	}
}

// TestUsageOfReadsWhatGIEPanicsOn: values of a type GIE's parser asserts without checking
// (it panics) count as absent here.
func TestUsageOfReadsWhatGIEPanicsOn(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"usage a number", `{"usage":5}`, `null`},
		{"count a string", `{"object":"chat.completion","usage":{"prompt_tokens":"3","completion_tokens":2}}`, `{"prompt_tokens":0,"completion_tokens":2,"total_tokens":0}`},
		{"details a list", `{"usage":{"prompt_tokens":3,"prompt_token_details":[1]}}`, `{"prompt_tokens":3,"completion_tokens":0,"total_tokens":0}`},
		{"cached tokens null", `{"usage":{"prompt_token_details":{"cached_tokens":null}}}`, `{"prompt_tokens":0,"completion_tokens":0,"total_tokens":0}`},
		{"count out of range", `{"usage":{"prompt_tokens":1e999,"total_tokens":4}}`, `{"prompt_tokens":0,"completion_tokens":0,"total_tokens":4}`},
	}
	fast := New("", Params{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := fast.ParseResponse(context.Background(), []byte(tt.body), nil, true); err != nil {
				t.Fatal(err) // GIE's parser would panic on several of these bodies
			}
			u, ok := usageOf([]byte(tt.body))
			got, _ := json.Marshal(u)
			if !ok || string(got) != tt.want {
				t.Fatalf("%s, %v; want %s", got, ok, tt.want)
			}
		})
	}
}

// TestStreamTokenChunkIsNotDecoded: a streamed token's chunk, which carries no usage, costs
// one allocation (the result) rather than GIE's decode of every line; the chunk with the usage
// still reads it.
func TestStreamTokenChunkIsNotDecoded(t *testing.T) {
	fast := New("", Params{})
	chunk := []byte(`data: {"id":"chatcmpl-7","object":"chat.completion.chunk","created":1764633600,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	if n := testing.AllocsPerRun(100, func() {
		if r, err := fast.ParseResponse(context.Background(), chunk, sse, false); err != nil || r == nil || r.Usage != nil {
			t.Fatalf("%+v, %v", r, err)
		}
	}); n > 1 {
		t.Fatalf("%.0f allocations a token chunk; want 1 (GIE's decode makes several)", n)
	}
	last := []byte(`data: {"id":"chatcmpl-7","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}` + "\n\ndata: [DONE]\n\n")
	if r, err := fast.ParseResponse(context.Background(), last, sse, true); err != nil || r == nil || r.Usage == nil || r.Usage.TotalTokens != 12 {
		t.Fatalf("usage chunk: %+v, %v", r, err)
	}
}

// FuzzParseResponse: on any body GIE's parser reads without panicking, this parser reads the
// same usage and fails where it fails, but for a number outside float64's range, which fails
// GIE's whole decode and leaves this parser's other counts readable. It never panics.
func FuzzParseResponse(f *testing.F) {
	for _, c := range responseCases {
		f.Add(c.body, c.headers["content-type"] != "")
	}
	f.Add(`{"usage":{"prompt_tokens":1},"choices":[{"x":1e999}]}`, false)
	stock := openai.NewOpenAIParser()
	fast := New("", Params{})
	f.Fuzz(func(t *testing.T, body string, stream bool) {
		headers := map[string]string{}
		if stream {
			headers["content-type"] = "text/event-stream"
		}
		got, gerr := fast.ParseResponse(context.Background(), []byte(body), headers, true)
		want, werr, panicked := func() (w any, err error, panicked bool) {
			defer func() { panicked = recover() != nil }()
			r, err := stock.ParseResponse(context.Background(), []byte(body), headers, true)
			return r, err, false
		}()
		switch {
		case panicked:
		case werr != nil && gerr == nil && strings.Contains(werr.Error(), "cannot unmarshal number"):
		case (werr == nil) != (gerr == nil):
			t.Fatalf("error %v, GIE's %v", gerr, werr)
		case werr == nil && !reflect.DeepEqual(want, got):
			t.Fatalf("%+v, GIE's %+v", got, want)
		}
	})
}

// FuzzStreamChunk: a streamed chunk of one or two data lines reads as GIE's openai-parser reads
// it (the JSON-shaped seeds let the fuzzer move keys, escapes, nesting and case).
func FuzzStreamChunk(f *testing.F) {
	for _, line := range []string{
		`{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" w\"o\\rd"},"finish_reason":null}]}`,
		`{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}}`,
		`{"a":{"usage":{"prompt_tokens":1}},"b":["usage",{"type":1}]}`,
		`{"k\u0065y":1,"Usage":{"prompt_tokens":3}}`,
		`{"type":"response.completed","response":{"object":"response","usage":{"input_tokens":3}}}`,
		` {"x":"\\","usage":{"prompt_tokens":7}} `,
		`[{"usage":{"prompt_tokens":1}}]`,
	} {
		f.Add(line, "")
		f.Add(line, `{"choices":[{"delta":{}}]}`)
	}
	stock := openai.NewOpenAIParser()
	fast := New("", Params{})
	f.Fuzz(func(t *testing.T, first, second string) {
		body := []byte("data: " + first + "\n\n")
		if second != "" {
			body = append(body, "data: "+second+"\n\n"...)
		}
		want, werr := stock.ParseResponse(context.Background(), body, sse, false)
		got, gerr := fast.ParseResponse(context.Background(), body, sse, false)
		if !reflect.DeepEqual(want, got) || (werr == nil) != (gerr == nil) {
			t.Fatalf("%q: %+v %v, GIE's %+v %v", body, got, gerr, want, werr)
		}
	})
}

// BenchmarkParseResponse compares GIE's openai-parser (the baseline) with this parser on a
// non-streaming chat completion's body (a short answer, and one of about 16 KB) and on a
// streamed token's chunk (one of the hundreds in a streamed answer), logging the ratios
// measured in the same run.
func BenchmarkParseResponse(b *testing.B) {
	h := map[string]string{"content-type": "application/json"}
	parsers := []struct {
		name string
		p    interface {
			ParseResponse(context.Context, []byte, map[string]string, bool) (*fwkrh.ParsedResponse, error)
		}
	}{{"gie-openai", openai.NewOpenAIParser()}, {"fast", New("", Params{})}}
	for _, n := range []int{200, 16 << 10} {
		body := []byte(`{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"message":{"role":"assistant","content":"` +
			bigText(n) + `"},"finish_reason":"stop"}],"usage":{"prompt_tokens":250,"completion_tokens":50,"total_tokens":300}}`)
		var baseNs, baseAllocs float64
		for _, pp := range parsers {
			ns, allocs := measure(b, fmt.Sprintf("%dB/%s", n, pp.name), body, func(body []byte) error {
				r, err := pp.p.ParseResponse(context.Background(), body, h, true)
				if err == nil && (r == nil || r.Usage == nil || r.Usage.TotalTokens != 300) {
					err = fmt.Errorf("usage %+v", r)
				}
				return err
			})
			if pp.name == "gie-openai" {
				baseNs, baseAllocs = ns, allocs
			} else if baseNs > 0 && ns > 0 {
				b.Logf("%d B answer: %.0f CPU ns/op (%.1fx less than gie-openai), %.0f allocs/op (%.1fx fewer)", n, ns, baseNs/ns, allocs, baseAllocs/max(allocs, 1))
			}
		}
	}
	chunk := []byte(`data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	var baseNs, baseAllocs float64
	for _, pp := range parsers {
		ns, allocs := measure(b, "token-chunk/"+pp.name, chunk, func(body []byte) error {
			r, err := pp.p.ParseResponse(context.Background(), body, sse, false)
			if err == nil && (r == nil || r.Usage != nil) {
				err = fmt.Errorf("usage %+v", r)
			}
			return err
		})
		if pp.name == "gie-openai" {
			baseNs, baseAllocs = ns, allocs
		} else if baseNs > 0 && ns > 0 {
			b.Logf("streamed token chunk: %.0f CPU ns/op (%.1fx less than gie-openai), %.0f allocs/op (%.1fx fewer)", ns, baseNs/ns, allocs, baseAllocs/max(allocs, 1))
		}
	}
}
