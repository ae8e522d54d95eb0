package tokenproducer

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestParseParameters(t *testing.T) {
	tests := []struct {
		name, params, wantErr string
		backend, url          string
		timeout, mm           time.Duration
	}{
		{name: "default estimate", backend: BackendEstimate},
		{name: "explicit estimate", params: `{"estimate":{"imageEstimator":"static"}}`, backend: BackendEstimate},
		{name: "vllm defaults", params: `{"vllm":{}}`, backend: BackendVLLM, url: "http://localhost:8000", timeout: 5 * time.Second, mm: 30 * time.Second},
		{name: "modelName selects vllm", params: `{"modelName":"m"}`, backend: BackendVLLM, url: "http://localhost:8000", timeout: 5 * time.Second, mm: 30 * time.Second},
		{name: "vllm http (HEAD spelling)", params: `{"vllm":{"http":"http://v:1/","timeout":"2s","mmTimeout":7}}`, backend: BackendVLLM, url: "http://v:1", timeout: 2 * time.Second, mm: 7 * time.Second},
		{name: "vllm url (newer spelling)", params: `{"vllm":{"url":"https://v:2"}}`, backend: BackendVLLM, url: "https://v:2", timeout: 5 * time.Second, mm: 30 * time.Second},
		{name: "both set", params: `{"estimate":{},"vllm":{}}`, wantErr: "only one of 'estimate', 'vllm', or 'udsTokenizerConfig' may be set"},
		{name: "uds unsupported", params: `{"udsTokenizerConfig":{"socketFile":"/x"}}`, wantErr: "not supported by pdgate"},
		{name: "http and url disagree", params: `{"vllm":{"http":"http://a","url":"http://b"}}`, wantErr: "disagree"},
		{name: "bad scheme", params: `{"vllm":{"url":"v:1"}}`, wantErr: "must start with http"},
		{name: "bad timeout", params: `{"vllm":{"timeout":"soon"}}`, wantErr: "vllm.timeout must be a positive duration"},
		{name: "negative timeout", params: `{"vllm":{"timeout":-1}}`, wantErr: "vllm.timeout"},
		{name: "unknown field", params: `{"vlm":{}}`, wantErr: `unknown field "vlm"`},
		{name: "bad image estimator", params: `{"estimate":{"imageEstimator":"magic"}}`, wantErr: "imageEstimator must be dynamic or static"},
		{name: "bad video fps", params: `{"estimate":{"videoFPS":-2}}`, wantErr: "videoFPS"},
		{name: "session cache headers", params: `{"sessionCache":{"headers":["X-Conversation"],"maxBytes":1024}}`, backend: BackendEstimate},
		{name: "session cache no header", params: `{"sessionCache":{"headers":[]}}`, wantErr: "sessionCache.headers must name at least one header"},
		{name: "session cache empty header", params: `{"sessionCache":{"headers":[" "]}}`, wantErr: "sessionCache.headers[0] is empty"},
		{name: "session cache negative budget", params: `{"sessionCache":{"maxBytes":-1}}`, wantErr: "sessionCache.maxBytes must be >= 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseParameters(Type, "test", json.RawMessage(tt.params))
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if p.Backend != tt.backend || p.VLLM.URL != tt.url || p.VLLM.Timeout != tt.timeout || p.VLLM.MMTimeout != tt.mm {
				t.Fatalf("%+v %v", p, err)
			}
		})
	}
}

func completion(prompt string) *fwksched.LLMRequest {
	return &fwksched.LLMRequest{RequestId: "r", TargetModel: "m",
		Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: prompt}}}}
}

func TestVLLMBackend(t *testing.T) {
	var gotPath, gotBody string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotPath, gotBody = r.URL.Path, string(b)
		switch r.URL.Path {
		case "/v1/completions/render":
			_, _ = w.Write([]byte(`[{"prompt_token_ids":[1,2,3,4,5]}]`))
		case "/v1/chat/completions/render":
			_, _ = w.Write([]byte(`{"engine_prompt":{"prompt_token_ids":[9,9]}}`))
		}
	}))
	defer srv.Close()
	p, err := Factory("tp", json.RawMessage(`{"vllm":{"url":"`+srv.URL+`"},"modelName":"served"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := completion("hello world")
	if err := p.(*Producer).PrepareRequestData(context.Background(), r, nil); err != nil {
		t.Fatal(err)
	}
	if len(r.TokenizedPrompt.TokenIDs) != 5 || gotPath != "/v1/completions/render" || !strings.Contains(gotBody, `"model":"served"`) {
		t.Fatalf("ids %v path %s body %s", r.TokenizedPrompt.TokenIDs, gotPath, gotBody)
	}
	var c fwksched.ChatCompletionsRequest
	_ = json.Unmarshal([]byte(`{"messages":[{"role":"user","content":"x"}]}`), &c)
	r2 := &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{ChatCompletions: &c}}
	if err := p.(*Producer).PrepareRequestData(context.Background(), r2, nil); err != nil || len(r2.TokenizedPrompt.TokenIDs) != 2 {
		t.Fatalf("chat: %v %v", err, r2.TokenizedPrompt)
	}
	// Idempotent: a second call keeps what is there.
	before := r2.TokenizedPrompt
	_ = p.(*Producer).PrepareRequestData(context.Background(), r2, nil)
	if r2.TokenizedPrompt != before {
		t.Fatal("not idempotent")
	}
}

func TestVLLMUnreachableKeepsEstimate(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	url := srv.URL
	srv.Close() // nothing listens there now
	p, err := Factory("tp", json.RawMessage(`{"vllm":{"url":"`+url+`","timeout":"1s"}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := completion("abcdefgh")
	err = p.(*Producer).PrepareRequestData(context.Background(), r, nil)
	if err == nil || !strings.Contains(err.Error(), "unreachable") || !strings.Contains(err.Error(), "using the estimate") {
		t.Fatalf("err %v", err)
	}
	if r.TokenizedPrompt == nil || len(r.TokenizedPrompt.TokenIDs) != 2 {
		t.Fatalf("estimate not kept: %v", r.TokenizedPrompt)
	}
}

func TestVLLMErrorStatus(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "model not found", http.StatusNotFound)
	}))
	defer srv.Close()
	p, _ := Factory("tp", json.RawMessage(`{"vllm":{"url":"`+srv.URL+`"}}`), nil)
	err := p.(*Producer).PrepareRequestData(context.Background(), completion("x"), nil)
	if err == nil || !strings.Contains(err.Error(), "answered 404") {
		t.Fatalf("err %v", err)
	}
}

func TestParseRenderResponse(t *testing.T) {
	tests := map[string]int{
		`{"prompt_token_ids":[1,2]}`:              2,
		`{"token_ids":[1]}`:                       1,
		`[{"prompt_token_ids":[1,2,3]}]`:          3,
		`{"engine_prompt":{"token_ids":[7]}}`:     1,
		`{"prompt_token_ids":[-1]}`:               -1,
		`{"prompt_token_ids":[1.5]}`:              -1,
		`{"x":1}`:                                 -1,
		`[]`:                                      -1,
		`nope`:                                    -1,
		`{"prompt_token_ids":[4294967295]}`:       1,
		`{"prompt_token_ids":[4294967296]}`:       -1,
		`{"prompt_token_ids":"not a list"}`:       -1,
		`{"prompt_token_ids":[],"token_ids":[1]}`: 0,
	}
	for in, want := range tests {
		ids, err := ParseRenderResponse([]byte(in))
		if want < 0 && err == nil || want >= 0 && (err != nil || len(ids) != want) {
			t.Errorf("%s: %v %v", in, ids, err)
		}
	}
}

func FuzzParseRenderResponse(f *testing.F) {
	f.Add([]byte(`{"prompt_token_ids":[1,2]}`))
	f.Add([]byte(`[{"engine_prompt":{"token_ids":[3]}}]`))
	f.Fuzz(func(t *testing.T, b []byte) { _, _ = ParseRenderResponse(b) })
}

func TestEnsureProducer(t *testing.T) {
	h := plugintest.Handle(context.Background())
	EnsureProducer(h)
	EnsureProducer(h) // idempotent
	if len(h.GetAllPlugins()) != 1 || h.Plugin(AutoName) == nil {
		t.Fatalf("auto producer: %v", h.GetAllPlugins())
	}
	// A declared producer prevents auto-creation.
	h2 := plugintest.Handle(context.Background())
	p, _ := LegacyFactory("tokenizer", nil, h2)
	h2.AddPlugin("tokenizer", p)
	EnsureProducer(h2)
	if len(h2.GetAllPlugins()) != 1 {
		t.Fatalf("duplicate producer: %v", h2.GetAllPlugins())
	}
	if got := p.(*Producer).Produces()[contract.TokenizedPromptKey]; got != (contract.TokenizedPromptData{}) {
		t.Fatal("token must be comparable and equal")
	}
}

func FuzzParseParameters(f *testing.F) {
	for _, s := range []string{``, `{"vllm":{"url":"http://a:1","timeout":"1s"}}`, `{"estimate":{"imageFactor":0}}`, `{"modelName":"m"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseParameters(Type, "test", json.RawMessage(s))
		if err != nil {
			return
		}
		if p.Backend == BackendVLLM && (p.VLLM.Timeout <= 0 || p.VLLM.MMTimeout <= 0 || !strings.HasPrefix(p.VLLM.URL, "http")) {
			t.Fatalf("accepted bad vllm params: %+v", p.VLLM)
		}
	})
}

// TestSessionCache: with a session header, a follow-up turn's tokens extend the previous
// turn's in place (the same backing array) and equal the whole estimate; without the header,
// or with the cache off, every turn is estimated whole.
func TestSessionCache(t *testing.T) {
	history := []fwksched.Message{{Role: "user", Content: fwksched.Content{Raw: strings.Repeat("a long history ", 200)}}}
	turn := func(headers map[string]string, msgs ...fwksched.Message) *fwksched.LLMRequest {
		return &fwksched.LLMRequest{RequestId: "r", TargetModel: "m", Headers: headers, Body: &fwksched.LLMRequestBody{
			ChatCompletions: &fwksched.ChatCompletionsRequest{Messages: append(append([]fwksched.Message{}, history...), msgs...)}}}
	}
	reply := []fwksched.Message{{Role: "assistant", Content: fwksched.Content{Raw: "ok"}}, {Role: "user", Content: fwksched.Content{Raw: "next?"}}}
	for _, tt := range []struct {
		name, params string
		headers      map[string]string
		wantShared   bool
	}{
		{"llm-d's x-session-id", ``, map[string]string{"x-session-id": "abc"}, true},
		{"a configured header", `{"sessionCache":{"headers":["x-conversation"]}}`, map[string]string{"x-conversation": "abc"}, true},
		{"no session header", ``, nil, false},
		{"cache off", `{"sessionCache":{"maxBytes":0}}`, map[string]string{"x-session-id": "abc"}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p, err := newProducer(Type, "tp", json.RawMessage(tt.params))
			if err != nil {
				t.Fatal(err)
			}
			first, next := turn(tt.headers), turn(tt.headers, reply...)
			for _, r := range []*fwksched.LLMRequest{first, next} {
				if err := p.PrepareRequestData(context.Background(), r, nil); err != nil {
					t.Fatal(err)
				}
			}
			want := turn(nil, reply...)
			if err := p.PrepareRequestData(context.Background(), want, nil); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(next.TokenizedPrompt.TokenIDs, want.TokenizedPrompt.TokenIDs) {
				t.Fatal("the follow-up's tokens differ from the whole estimate")
			}
			if shared := &next.TokenizedPrompt.TokenIDs[0] == &first.TokenizedPrompt.TokenIDs[0]; shared != tt.wantShared {
				t.Fatalf("follow-up extends the previous turn's tokens in place: %v, want %v", shared, tt.wantShared)
			}
		})
	}
}
