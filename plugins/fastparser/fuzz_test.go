package fastparser

import (
	"context"
	"encoding/json"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/openai"
)

// FuzzParseRequest checks that any body either fails cleanly or parses into a payload the
// director can send: raw bytes unchanged, or a map that marshals to JSON; and that this
// parser accepts a body exactly when GIE's openai-parser does (keys are case-sensitive in
// both for the top level, see README for the one known difference).
func FuzzParseRequest(f *testing.F) {
	for _, c := range parseCases() {
		f.Add(c.path, c.body)
	}
	f.Add("/v1/chat/completions", `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"x":{"y":[1,2,{"z":null}]}}`)
	stock := openai.NewOpenAIParser()
	parsers := []*Parser{New("", Params{Payload: ModeMap, RawValueBytes: 4}), New("", Params{Payload: ModeRaw})}
	f.Fuzz(func(t *testing.T, path, body string) {
		h := map[string]string{":path": path}
		_, stockErr := stock.ParseRequest(context.Background(), []byte(body), h)
		for _, p := range parsers {
			got, err := p.ParseRequest(context.Background(), []byte(body), h)
			if (err == nil) != (stockErr == nil) {
				t.Fatalf("%s: accept mismatch: stock %v, fast %v", p.p.Payload, stockErr, err)
			}
			if err != nil {
				continue
			}
			switch v := got.Payload.(type) {
			case fwksched.RawPayload:
				if string(v) != body {
					t.Fatal("raw payload changed the body")
				}
			case fwksched.PayloadMap:
				b, err := json.Marshal(v)
				if err != nil || !json.Valid(b) {
					t.Fatalf("payload map does not marshal: %v", err)
				}
			default:
				t.Fatalf("payload %T", got.Payload)
			}
		}
	})
}

// FuzzSplitObject checks the top-level splitter against encoding/json on every valid object.
func FuzzSplitObject(f *testing.F) {
	for _, c := range parseCases() {
		f.Add(c.body)
	}
	f.Add(`{"a\"b":"x]}","c":[{"d":"}"}], "e" : -1.5e3 ,"a\"b":true}`)
	f.Fuzz(func(t *testing.T, body string) {
		var want map[string]json.RawMessage
		if json.Unmarshal([]byte(body), &want) != nil || want == nil {
			return
		}
		got, err := splitObject([]byte(body))
		if err != nil {
			t.Fatalf("split %q: %v", body, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d members, want %d", len(got), len(want))
		}
		for _, m := range got {
			if string(m.value) != string(want[m.key]) {
				t.Fatalf("%q = %s, want %s", m.key, m.value, want[m.key])
			}
		}
	})
}
