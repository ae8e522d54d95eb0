package openaiparser

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/openai"

	"github.com/pdgate/pdgate/plugins/lib/bodyjson"
)

// FuzzParseRequest is the differential test against GIE's openai-parser (encoding/json): a
// body is accepted exactly when GIE accepts it, every field plugins read is equal (the typed
// API struct, Stream, the prompt text, the cache salt), and the payload is sendable: the raw
// bytes unchanged, or a map that marshals to JSON.
func FuzzParseRequest(f *testing.F) {
	for _, c := range parseCases() {
		if len(c.body) < 4096 {
			f.Add(c.path, c.body)
		}
	}
	f.Add("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"x":{"y":[1,2,{"z":null}]}}`)
	stock := openai.NewOpenAIParser()
	parsers := []*Parser{New("", Params{Payload: ModeMap, RawValueBytes: 4}), New("", Params{Payload: ModeRaw})}
	f.Fuzz(func(t *testing.T, path, body string) {
		h := map[string]string{":path": path}
		want, stockErr := stock.ParseRequest(context.Background(), []byte(body), h)
		for _, p := range parsers {
			got, span, err := p.ParseRequestLocatingModel(context.Background(), []byte(body), h)
			if (err == nil) != (stockErr == nil) {
				t.Fatalf("%s: accept mismatch: stock %v, fast %v", p.p.Payload, stockErr, err)
			}
			if err != nil {
				continue
			}
			if !reflect.DeepEqual(want.Completions, got.Completions) || !reflect.DeepEqual(want.ChatCompletions, got.ChatCompletions) ||
				!reflect.DeepEqual(want.Responses, got.Responses) || !reflect.DeepEqual(want.Conversations, got.Conversations) ||
				!reflect.DeepEqual(want.Embeddings, got.Embeddings) || want.Stream != got.Stream ||
				want.PromptText() != got.PromptText() || want.CacheSalt() != got.CacheSalt() {
				t.Fatalf("%s: fields differ:\nstock %+v\nfast  %+v", p.p.Payload, want, got)
			}
			switch v := got.Payload.(type) {
			case fwksched.RawPayload:
				if string(v) != body {
					t.Fatal("raw payload changed the body")
				}
				m, ok := topLevelModel(v)
				if !ok || m != want.Payload.(fwksched.PayloadMap)["model"] {
					t.Fatalf("raw payload model %q (ok=%v), stock map %v", m, ok, want.Payload.(fwksched.PayloadMap)["model"])
				}
				bm, start, end, err := bodyjson.ModelSpan(v)
				if err != nil || bm != m {
					t.Fatalf("bodyjson.ModelSpan %q (%v), scanner %q", bm, err, m)
				}
				if !span.Found() || span.Model != bm || span.Start != start || span.End != end {
					t.Fatalf("located model %+v, bodyjson.ModelSpan %q [%d:%d]", span, bm, start, end)
				}
			case fwksched.PayloadMap:
				if span.Found() {
					t.Fatalf("a map payload must not locate a model span: %+v", span)
				}
				b, err := json.Marshal(v)
				if err != nil || !json.Valid(b) {
					t.Fatalf("payload map does not marshal: %v", err)
				}
				// Every value as stock decodes it; one left as JSON text decodes to it.
				wm := want.Payload.(fwksched.PayloadMap)
				if len(v) != len(wm) {
					t.Fatalf("payload keys: stock %d, fast %d", len(wm), len(v))
				}
				for k, w := range wm {
					g := v[k]
					if raw, isRaw := g.(json.RawMessage); isRaw {
						if k == "model" || k == "stream" {
							t.Fatalf("%s left undecoded", k)
						}
						if err := json.Unmarshal(raw, &g); err != nil {
							t.Fatalf("%s: undecoded value does not decode: %v", k, err)
						}
					}
					if !reflect.DeepEqual(g, w) {
						t.Fatalf("payload %q: stock %#v, fast %#v", k, w, g)
					}
				}
			default:
				t.Fatalf("payload %T", got.Payload)
			}
		}
	})
}

// FuzzScanner checks the scanner's grammar against encoding/json on any input, and its string
// decoding on every valid string.
func FuzzScanner(f *testing.F) {
	for _, c := range parseCases() {
		if len(c.body) < 4096 {
			f.Add(c.body)
		}
	}
	f.Add(`"\ud800\udc00\udbff\udfff\ud800x\udc00"`)
	f.Add(`[1,-0,0.5e+3,"a\"b\\"]`)
	// Strings long enough for strLong, with escapes, an escaped quote and a bad byte to mutate.
	f.Add(`{"content":"` + strings.Repeat(`a line of a prompt\n`, 20) + `\"x\" \u00e9` + "\xff" + `"}`)
	f.Fuzz(func(t *testing.T, in string) {
		s := scanner{b: []byte(in)}
		s.ws()
		ok := s.skip()
		if ok {
			s.ws()
			ok = s.i == len(in)
		}
		if ok != json.Valid([]byte(in)) {
			t.Fatalf("scanner valid=%v, encoding/json valid=%v", ok, !ok)
		}
		if ok && len(in) > 0 {
			s := scanner{b: []byte(in)}
			if s.peek() != '"' {
				return
			}
			start, end, plain, _ := s.str()
			var want string
			if err := json.Unmarshal([]byte(in), &want); err != nil {
				t.Fatal(err)
			}
			if got := unquote([]byte(in)[start:end], plain); got != want {
				t.Fatalf("unquote %q = %q, want %q", in, got, want)
			}
		}
	})
}
