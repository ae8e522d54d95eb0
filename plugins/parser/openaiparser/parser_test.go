package openaiparser

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/openai"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

type parseCase struct {
	name    string
	path    string
	body    string
	headers map[string]string
}

func bigText(n int) string { return strings.Repeat("lorem ipsum <b>&</b> \u00e9\\n ", n/24+1)[:n] }

func parseCases() []parseCase {
	long := bigText(4000)
	return []parseCase{
		{name: "chat", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":7,"stream":true}`},
		{name: "chat long with html", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"system","content":"` + long + `"},{"role":"user","content":"q"}],"max_completion_tokens":3,"stream_options":{"include_usage":true}}`},
		{name: "chat multimodal blocks", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what"},{"type":"image_url","image_url":{"url":"http://x/a.png"}}]}]}`},
		{name: "chat tools and template", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function"}],"chat_template":"t","add_generation_prompt":true,"chat_template_kwargs":{"a":1},"cache_salt":"s"}`},
		{name: "chat no messages", path: "/v1/chat/completions", body: `{"model":"m","messages":[]}`},
		{name: "chat messages wrong type", path: "/v1/chat/completions", body: `{"model":"m","messages":5}`},
		{name: "completions string", path: "/v1/completions", body: `{"model":"m","prompt":"` + long + `","stream":false}`},
		{name: "completions array", path: "/v1/completions", body: `{"model":"m","prompt":["a","b"],"temperature":0.5}`},
		{name: "completions empty prompt", path: "/v1/completions", body: `{"model":"m","prompt":""}`},
		{name: "default path", body: `{"model":"m","prompt":"p"}`},
		{name: "x-original-path", headers: map[string]string{"x-original-path": "/v1/chat/completions"}, body: `{"model":"m","messages":[{"role":"user","content":"x"}]}`},
		{name: "responses", path: "/v1/responses", body: `{"model":"m","input":"hello","instructions":"be brief"}`},
		{name: "responses no input", path: "/v1/responses", body: `{"model":"m"}`},
		{name: "conversations", path: "/v1/conversations", body: `{"model":"m","items":[{"type":"message","role":"user","content":"x"}]}`},
		{name: "embeddings", path: "/v1/embeddings", body: `{"model":"m","input":["a","b"]}`},
		{name: "no model", path: "/v1/completions", body: `{"prompt":"p"}`},
		{name: "model not string", path: "/v1/completions", body: `{"model":5,"prompt":"p"}`},
		{name: "stream not bool", path: "/v1/completions", body: `{"model":"m","prompt":"p","stream":"true"}`},
		{name: "syntax error", path: "/v1/completions", body: `{"model":"m","prompt":"p"`},
		{name: "array body", path: "/v1/completions", body: `[1,2]`},
		{name: "null body", path: "/v1/completions", body: `null`},
		{name: "empty body", path: "/v1/completions", body: ``},
		{name: "unicode escapes and surrogate pairs", path: "/v1/chat/completions", body: `{"model":"m\u00e9","messages":[{"role":"us\u0065r","content":"caf\u00e9 \ud83d\ude00 \"q\" \\ \/ \b\f\n\r\t"}]}`},
		{name: "lone and mismatched surrogates", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":"a\ud83d b\ude00 c\ud83d\u0041 d\ud83d\ud83d\ude00"}]}`},
		{name: "invalid utf8 and raw non-ascii", path: "/v1/chat/completions", body: "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe ok \xe2\x82 \u00e9 \xc3\xa9\"}]}"},
		{name: "escaped keys", path: "/v1/chat/completions", body: `{"\u006dodel":"m","mess\u0061ges":[{"role":"user","content":"x"}],"str\u0065am":true}`},
		{name: "case-folded keys", path: "/v1/chat/completions", body: `{"model":"m","MESSAGES":[{"ROLE":"user","Content":"x"}],"Cache_Salt":"s","STREAM":true}`},
		{name: "unicode-folded key", path: "/v1/chat/completions", body: `{"model":"m","me\u017f\u017fages":[{"role":"user","content":"x"}]}`},
		{name: "duplicate messages merge", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"a","content":"x"},{"role":"b","content":[{"type":"text","text":"t"}]},{"role":"c"}],"messages":[{"content":"y"}],"messages":[null,{"content":"z"},{"role":"d"},{}]}`},
		{name: "duplicate content string then blocks", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"u","content":"x","content":[{"type":"text","text":"t"}]},{"content":[],"content":null}]}`},
		{name: "duplicate model last wins", path: "/v1/completions", body: `{"model":"a","prompt":"p","model":"b"}`},
		{name: "duplicate model last not string", path: "/v1/completions", body: `{"model":"a","prompt":"p","model":null}`},
		{name: "duplicate stream", path: "/v1/completions", body: `{"model":"m","prompt":"p","stream":true,"stream":false}`},
		{name: "duplicate kwargs merge", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"content":"x"}],"chat_template_kwargs":{"a":1},"chat_template_kwargs":{"b":[true]},"tools":[1,2],"tools":[{"x":null}]}`},
		{name: "nested content arrays", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA","url":"u2"}},{"type":"input_audio","input_audio":{"data":"d","format":"wav"}},{"type":"video_url","video_url":{"url":"v"}},{"type":"text","text":"b","extra":[[[{}]]]}]}]}`},
		{name: "content blocks folded keys and nulls", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":[null,{"TYPE":"text","Text":"a","text":null},{"type":"image_url","IMAGE_URL":null,"image_url":{"URL":"u","url":null,"x":1}},{"type":"input_audio","input_audio":{"Data":"d"},"input_audio":{"format":"mp3"}},{"video_url":null}]}]}`},
		{name: "content blocks empty", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":[]}]}`},
		{name: "content block image_url string", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":"http://x"}]}]}`},
		{name: "content block audio wrong type", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":[1]}}]}]}`},
		{name: "content block array", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":[["text"]]}]}`},
		{name: "content blocks long text", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"` + long + `"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + strings.Repeat("QUJD", 500) + `"}}]}]}`},
		{name: "content block wrong type", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":[{"type":5}]}]}`},
		{name: "content object", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":{"text":"x"}}]}`},
		{name: "content number", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":5}]}`},
		{name: "content null", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":"user","content":null}]}`},
		{name: "role wrong type", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":1,"content":"x"}]}`},
		{name: "role null", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"role":null,"content":"x"}]}`},
		{name: "message null", path: "/v1/chat/completions", body: `{"model":"m","messages":[null]}`},
		{name: "message array", path: "/v1/chat/completions", body: `{"model":"m","messages":[["x"]]}`},
		{name: "messages null", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"content":"x"}],"messages":null}`},
		{name: "tools wrong type", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"content":"x"}],"tools":{}}`},
		{name: "bool field wrong type", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"content":"x"}],"add_generation_prompt":"yes"}`},
		{name: "type error then syntax error", path: "/v1/chat/completions", body: `{"model":"m","messages":5,"x":tru}`},
		{name: "prompt null", path: "/v1/completions", body: `{"model":"m","prompt":null}`},
		{name: "prompt array with null", path: "/v1/completions", body: `{"model":"m","prompt":["a",null,"c"],"prompt":["x"]}`},
		{name: "prompt array wrong type", path: "/v1/completions", body: `{"model":"m","prompt":["a",1]}`},
		{name: "prompt number", path: "/v1/completions", body: `{"model":"m","prompt":1}`},
		{name: "numbers", path: "/v1/completions", body: ` { "model" : "m" , "prompt" : "p" , "a" : -0 , "b" : [1e5, -1.5E-3, 0.0, 12] , "c" : {"d":[true,false,null]} } `},
		{name: "leading zero", path: "/v1/completions", body: `{"model":"m","prompt":"p","a":01}`},
		{name: "bad fraction", path: "/v1/completions", body: `{"model":"m","prompt":"p","a":1.}`},
		{name: "bad exponent", path: "/v1/completions", body: `{"model":"m","prompt":"p","a":1e}`},
		{name: "control char in string", path: "/v1/completions", body: "{\"model\":\"m\",\"prompt\":\"a\x01b\"}"},
		{name: "bad escape", path: "/v1/completions", body: `{"model":"m","prompt":"a\x"}`},
		{name: "short unicode escape", path: "/v1/completions", body: `{"model":"m","prompt":"a\u12"}`},
		{name: "trailing garbage", path: "/v1/completions", body: `{"model":"m","prompt":"p"} x`},
		{name: "trailing comma", path: "/v1/completions", body: `{"model":"m","prompt":"p",}`},
		{name: "missing colon", path: "/v1/completions", body: `{"model" "m"}`},
		{name: "bad literal", path: "/v1/completions", body: `{"model":"m","prompt":"p","a":nul}`},
		{name: "string body", path: "/v1/completions", body: `"x"`},
		{name: "depth 10000", path: "/v1/completions", body: `{"model":"m","prompt":"p","a":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `}`},
		{name: "depth 10001", path: "/v1/completions", body: `{"model":"m","prompt":"p","a":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `}`},
		{name: "depth 10001 in messages", path: "/v1/chat/completions", body: `{"model":"m","messages":[{"content":"x","a":` + strings.Repeat("{\"a\":", 9998) + "1" + strings.Repeat("}", 9998) + `}]}`},
		{name: "responses duplicate input", path: "/v1/responses", body: `{"model":"m","input":[{"role":"user","content":"x"}],"INPUT":"y","tools":[{"type":"f"}]}`},
		{name: "conversations merge items", path: "/v1/conversations", body: `{"model":"m","items":[{"type":"message","role":"user","content":"x"}],"items":[{"role":"a"}],"metadata":{"k":"v"}}`},
		{name: "embeddings null input", path: "/v1/embeddings", body: `{"model":"m","input":null}`},
		{name: "rewrite header", path: "/v1/completions", headers: map[string]string{"x-gateway-model-name-rewrite": "other"}, body: `{"model":"m","prompt":"` + long + `"}`},
	}
}

func (c parseCase) hdrs() map[string]string {
	h := map[string]string{}
	for k, v := range c.headers {
		h[k] = v
	}
	if c.path != "" {
		h[":path"] = c.path
	}
	return h
}

// repackage does what GIE's director does with a parsed body (model check, rewrite to the
// x-gateway-model-name-rewrite target, re-marshal a PayloadMap) and returns the bytes sent
// upstream and the incoming model, or ok=false where the director answers 400.
func repackage(t *testing.T, body []byte, headers map[string]string, pb *fwksched.LLMRequestBody) (sent []byte, model string, ok bool) {
	t.Helper()
	switch v := pb.Payload.(type) {
	case fwksched.RawPayload:
		return body, "", true
	case fwksched.PayloadMap:
		model, ok = v["model"].(string)
		if !ok {
			return nil, "", false
		}
		target := model
		if h := headers["x-gateway-model-name-rewrite"]; h != "" {
			target = h
		}
		v["model"] = target
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("marshal payload: %v", err)
		}
		return b, model, true
	}
	t.Fatalf("unexpected payload %T", pb.Payload)
	return nil, "", false
}

func decodeAny(t *testing.T, b []byte) any {
	t.Helper()
	var x any
	if err := json.Unmarshal(b, &x); err != nil {
		t.Fatalf("sent body is not JSON: %v\n%s", err, b)
	}
	return x
}

// TestMatchesGIEOpenAIParser parses the same bodies with GIE's openai-parser and this parser
// (both modes) and compares the LLMRequestBody fields, the error text and the bytes the
// director would send upstream.
func TestMatchesGIEOpenAIParser(t *testing.T) {
	stock := openai.NewOpenAIParser()
	for _, mode := range []string{ModeMap, ModeRaw} {
		fast := New("", Params{Payload: mode})
		for _, c := range parseCases() {
			t.Run(mode+"/"+c.name, func(t *testing.T) {
				ctx := context.Background()
				want, wantErr := stock.ParseRequest(ctx, []byte(c.body), c.hdrs())
				got, gotErr := fast.ParseRequest(ctx, []byte(c.body), c.hdrs())
				if (wantErr == nil) != (gotErr == nil) {
					t.Fatalf("error mismatch: stock %v, fast %v", wantErr, gotErr)
				}
				if wantErr != nil {
					if !strings.HasPrefix(gotErr.Error(), strings.SplitN(wantErr.Error(), ":", 2)[0]) {
						t.Fatalf("error text: stock %q, fast %q", wantErr, gotErr)
					}
					return
				}
				if !reflect.DeepEqual(want.Completions, got.Completions) || !reflect.DeepEqual(want.ChatCompletions, got.ChatCompletions) ||
					!reflect.DeepEqual(want.Responses, got.Responses) || !reflect.DeepEqual(want.Conversations, got.Conversations) ||
					!reflect.DeepEqual(want.Embeddings, got.Embeddings) || want.Stream != got.Stream {
					t.Fatalf("body mismatch:\nstock %+v\nfast  %+v", want, got)
				}
				if want.PromptText() != got.PromptText() || want.CacheSalt() != got.CacheSalt() {
					t.Fatalf("prompt text or cache salt differ")
				}
				wantSent, wantModel, wantOK := repackage(t, []byte(c.body), c.hdrs(), want)
				gotSent, gotModel, gotOK := repackage(t, []byte(c.body), c.hdrs(), got)
				if wantOK != gotOK {
					t.Fatalf("director model check: stock ok=%v, fast ok=%v", wantOK, gotOK)
				}
				if !wantOK {
					return
				}
				if _, raw := got.Payload.(fwksched.RawPayload); !raw && gotModel != wantModel {
					t.Fatalf("incoming model: stock %q, fast %q", wantModel, gotModel)
				}
				if !reflect.DeepEqual(decodeAny(t, wantSent), decodeAny(t, gotSent)) {
					t.Fatalf("upstream body differs:\nstock %.300s\nfast  %.300s", wantSent, gotSent)
				}
			})
		}
	}
}

func TestPayloadKinds(t *testing.T) {
	long := `{"model":"m","prompt":"` + bigText(5000) + `","max_tokens":9,"stream":true}`
	tests := []struct {
		name      string
		p         Params
		headers   map[string]string
		wantRaw   bool
		rawKeys   []string
		valueKeys map[string]any
	}{
		{name: "raw keeps bytes", p: Params{Payload: ModeRaw}, wantRaw: true},
		{name: "raw with same-model rewrite header keeps bytes", p: Params{Payload: ModeRaw}, headers: map[string]string{"x-gateway-model-name-rewrite": "m"}, wantRaw: true},
		{name: "raw falls back to map on rewrite", p: Params{Payload: ModeRaw}, headers: map[string]string{"x-gateway-model-name-rewrite": "n"},
			rawKeys: []string{"prompt"}, valueKeys: map[string]any{"model": "m", "max_tokens": 9.0, "stream": true}},
		{name: "map keeps large values raw", p: Params{}, rawKeys: []string{"prompt"}, valueKeys: map[string]any{"model": "m", "max_tokens": 9.0, "stream": true}},
		{name: "map decodes everything under a large threshold", p: Params{RawValueBytes: 1 << 20}, valueKeys: map[string]any{"model": "m", "max_tokens": 9.0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := map[string]string{":path": "/v1/completions"}
			for k, v := range tt.headers {
				h[k] = v
			}
			got, err := New("x", tt.p).ParseRequest(context.Background(), []byte(long), h)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Stream {
				t.Error("stream not set")
			}
			if raw, ok := got.Payload.(fwksched.RawPayload); ok != tt.wantRaw || (ok && string(raw) != long) {
				t.Fatalf("payload %T, want raw=%v", got.Payload, tt.wantRaw)
			}
			if tt.wantRaw {
				return
			}
			m := got.Payload.(fwksched.PayloadMap)
			for _, k := range tt.rawKeys {
				if _, ok := m[k].(json.RawMessage); !ok {
					t.Errorf("%s: %T, want json.RawMessage", k, m[k])
				}
			}
			for k, v := range tt.valueKeys {
				if !reflect.DeepEqual(m[k], v) {
					t.Errorf("%s = %#v, want %#v", k, m[k], v)
				}
			}
		})
	}
}

func TestParams(t *testing.T) {
	tests := []struct {
		raw     string
		want    Params
		wantErr string
	}{
		{raw: ``, want: Params{Payload: ModeMap, RawValueBytes: DefaultRawValueBytes}},
		{raw: `{"payload":"raw","rawValueBytes":64}`, want: Params{Payload: ModeRaw, RawValueBytes: 64}},
		{raw: `{"payload":"proto"}`, wantErr: `pdgate-openai-parser "p": parameter payload="proto"`},
		{raw: `{"rawValueBytes":-1}`, wantErr: `parameter rawValueBytes=-1`},
		{raw: `{"payloads":"raw"}`, wantErr: `pdgate-openai-parser "p": invalid parameters`},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			pl, err := Factory("p", json.RawMessage(tt.raw), nil)
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			p := pl.(*Parser)
			if p.p != tt.want || p.TypedName().Type != Type || p.TypedName().Name != "p" {
				t.Fatalf("got %+v %v", p.p, p.TypedName())
			}
		})
	}
}

func TestPrepareRequestDataFillsTargetModel(t *testing.T) {
	long := bigText(3000)
	tests := []struct {
		name, body, target, want string
		mode                     string
	}{
		{name: "raw body model", mode: ModeRaw, body: `{"model":"m1","prompt":"` + long + `"}`, want: "m1"},
		{name: "raw last duplicate", mode: ModeRaw, body: `{"model":"a","prompt":"p","model":"b\u00e9"}`, want: "bé"},
		{name: "raw model after a long value", mode: ModeRaw, body: `{"prompt":"` + long + `","x":[{"model":"no"}],"model":"m2"}`, want: "m2"},
		{name: "target already set", mode: ModeRaw, body: `{"model":"m1","prompt":"p"}`, target: "rewritten", want: "rewritten"},
		{name: "map payload untouched", mode: ModeMap, body: `{"model":"m1","prompt":"p"}`, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New("", Params{Payload: tt.mode})
			body, err := p.ParseRequest(context.Background(), []byte(tt.body), map[string]string{":path": "/v1/completions"})
			if err != nil {
				t.Fatal(err)
			}
			req := &fwksched.LLMRequest{Body: body, TargetModel: tt.target}
			if err := p.PrepareRequestData(context.Background(), req, nil); err != nil {
				t.Fatal(err)
			}
			if req.TargetModel != tt.want {
				t.Fatalf("TargetModel %q, want %q", req.TargetModel, tt.want)
			}
		})
	}
	if err := New("", Params{}).PrepareRequestData(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
}
