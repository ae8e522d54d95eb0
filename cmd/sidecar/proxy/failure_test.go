package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// prefillAnswer answers like a vLLM NIXL prefiller that finished with finish and generated
// tokens tokens.
func prefillAnswer(finish string, tokens int) func(w http.ResponseWriter, r *http.Request, b map[string]any) {
	return func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		jsonAnswer(w, 200, map[string]any{
			"choices":            []any{map[string]any{"text": "x", "finish_reason": finish}},
			"kv_transfer_params": map[string]any{"do_remote_prefill": true, "remote_engine_id": "eng-1", "remote_block_ids": []any{1}, "remote_host": "10.9.9.9", "remote_port": 5600},
			"usage":              map[string]any{"prompt_tokens": 10, "completion_tokens": tokens},
		})
	}
}

func TestPrefillFailurePolicies(t *testing.T) {
	status := func(code int) func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		return func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			jsonAnswer(w, code, map[string]any{"error": map[string]any{"message": "prefiller says no"}})
		}
	}
	failTwice := func() func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		var n atomic.Int32
		return func(w http.ResponseWriter, r *http.Request, b map[string]any) {
			if n.Add(1) <= 2 {
				jsonAnswer(w, 502, map[string]any{})
				return
			}
			prefillOK(w, r, b)
		}
	}
	tests := []struct {
		name        string
		policy      FailurePolicy
		prefill     func(w http.ResponseWriter, r *http.Request, b map[string]any)
		closed      bool // prefill target not listening
		wantStatus  int
		wantOutcome string
		wantPrefill int
		wantDecode  int
		wantErrHdr  bool
		wantCause   string // x-pdgate-error-cause
	}{
		{name: "fail-fast 500 keeps prefiller status after the one retry", policy: FailFast, prefill: status(500), wantStatus: 500, wantOutcome: "failed", wantPrefill: 2, wantErrHdr: true},
		{name: "fail-fast transport is 503", policy: FailFast, closed: true, wantStatus: 503, wantOutcome: "failed", wantErrHdr: true},
		{name: "fail-fast bad body is 503", policy: FailFast, prefill: func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			_, _ = w.Write([]byte("not json"))
		}, wantStatus: 503, wantOutcome: "failed", wantPrefill: 2, wantErrHdr: true},
		{name: "fail-fast: a prefill that answers 200 but aborted is 503 after the one retry", policy: FailFast,
			prefill: prefillAnswer("abort", 1), wantStatus: 503, wantOutcome: "failed", wantPrefill: 2, wantErrHdr: true},
		{name: "fallback-local: a prefill that answers length with no token decodes locally", policy: FallbackLocal,
			prefill: prefillAnswer("length", 0), wantStatus: 200, wantOutcome: "fallback-local", wantPrefill: 2, wantDecode: 1},
		{name: "a prefill that stopped on its one token is complete", policy: FailFast,
			prefill: prefillAnswer("stop", 1), wantStatus: 200, wantOutcome: "ok", wantPrefill: 1, wantDecode: 1},
		{name: "4xx returned as is under fallback", policy: FallbackLocal, prefill: status(400), wantStatus: 400, wantOutcome: "failed", wantPrefill: 1, wantErrHdr: true},
		{name: "fallback-local on 503 after the one retry", policy: FallbackLocal, prefill: status(503), wantStatus: 200, wantOutcome: "fallback-local", wantPrefill: 2, wantDecode: 1},
		{name: "fallback-local on transport", policy: FallbackLocal, closed: true, wantStatus: 200, wantOutcome: "fallback-local", wantDecode: 1},
		{name: "retry then succeed", policy: Retry, prefill: failTwice(), wantStatus: 200, wantOutcome: "ok", wantPrefill: 3, wantDecode: 1},
		{name: "retry exhausted", policy: Retry, prefill: status(429), wantStatus: 429, wantOutcome: "failed", wantPrefill: 3, wantErrHdr: true},
		{name: "retry does not retry 4xx", policy: Retry, prefill: status(422), wantStatus: 422, wantOutcome: "failed", wantPrefill: 1, wantErrHdr: true},
		{name: "a prefill 404 for an unknown model is a model error, not a failed prefill", policy: FallbackLocal,
			prefill: func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(404)
				_, _ = w.Write(protocol.ModelNotFoundBody("m"))
			}, wantStatus: 404, wantOutcome: "failed", wantPrefill: 1, wantCause: protocol.CauseModelNotFound},
		{name: "any other prefill 404 stays a failed prefill", policy: FallbackLocal, prefill: status(404),
			wantStatus: 404, wantOutcome: "failed", wantPrefill: 1, wantErrHdr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pre := newFake(t, tt.prefill)
			dec := newFake(t, decodeOK)
			target := pre.hp()
			if tt.closed {
				pre.srv.Close()
			}
			cfg := testConfig(dec, target)
			cfg.FailurePolicy = tt.policy
			env := startProxy(t, cfg)
			resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"p","kv_transfer_params":{"remote_host":"evil"}}`,
				map[string]string{protocol.HeaderPrefillerHostPort: target.String()})
			checkPrefillAnswer(t, resp, body, tt.wantStatus, tt.wantOutcome, tt.wantErrHdr)
			if cause := resp.Header.Get(headerErrorCause); (cause != "") != (tt.wantErrHdr || tt.wantOutcome == outcomeFallback) {
				t.Errorf("x-error-pd-cause %q on a %d %s answer", cause, resp.StatusCode, tt.wantOutcome)
			}
			if got := resp.Header.Get(protocol.HeaderErrorCause); got != tt.wantCause {
				t.Errorf("x-pdgate-error-cause %q, want %q", got, tt.wantCause)
			}
			if !tt.closed {
				if got := len(pre.requests()); got != tt.wantPrefill {
					t.Errorf("prefill attempts %d, want %d", got, tt.wantPrefill)
				}
			}
			decs := dec.requests()
			if len(decs) != tt.wantDecode {
				t.Fatalf("decodes %d, want %d", len(decs), tt.wantDecode)
			}
			if tt.wantOutcome == "fallback-local" {
				if _, ok := decs[0].Body["kv_transfer_params"]; ok {
					t.Errorf("fallback decode must carry no kv_transfer_params: %s", decs[0].Raw)
				}
			}
			if tt.wantStatus >= 400 {
				var e protocol.OpenAIError
				if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Message == "" || resp.Header.Get("Content-Type") != "application/json" {
					t.Errorf("error body not OpenAI-shaped JSON (%s): %s", resp.Header.Get("Content-Type"), body)
				}
			}
		})
	}
}

func TestPrefillRedirectNotFollowed(t *testing.T) {
	var hit atomic.Int32
	other := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) { hit.Add(1) })
	pre := newFake(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		http.Redirect(w, r, other.srv.URL+"/v1/completions", http.StatusTemporaryRedirect)
	})
	dec := newFake(t, decodeOK)
	env := startProxy(t, testConfig(dec, pre.hp()))
	resp, _ := env.post(t, "/v1/completions", `{"model":"m","prompt":"p"}`, map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()})
	if hit.Load() != 0 {
		t.Fatal("redirect was followed")
	}
	if resp.StatusCode != 503 || resp.Header.Get(protocol.HeaderErrorPrefill) != "true" {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestRequestValidation(t *testing.T) {
	pre := newFake(t, prefillOK)
	dec := newFake(t, decodeOK)
	cfg := testConfig(dec, pre.hp())
	cfg.MaxRequestBytes = 256
	env := startProxy(t, cfg)
	ph := map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()}
	tests := []struct {
		name       string
		body       string
		hdr        map[string]string
		wantStatus int
		wantHdr    string
	}{
		{name: "duplicate controlled key", body: `{"model":"m","prompt":"p","stream":false,"stream":true}`, hdr: ph, wantStatus: 400},
		{name: "duplicate kv key", body: `{"model":"m","kv_transfer_params":{},"kv_transfer_params":{}}`, hdr: ph, wantStatus: 400},
		{name: "too large", body: `{"prompt":"` + strings.Repeat("a", 300) + `"}`, hdr: ph, wantStatus: 413},
		{name: "not json", body: `{"prompt":NaN}`, wantStatus: 400},
		{name: "malformed prefill header", body: `{}`, hdr: map[string]string{protocol.HeaderPrefillerHostPort: "http://x:1/"}, wantStatus: 400, wantHdr: protocol.HeaderErrorPrefill},
		{name: "prefill not allowed", body: `{}`, hdr: map[string]string{protocol.HeaderPrefillerHostPort: "10.1.2.3:8000"}, wantStatus: 403, wantHdr: protocol.HeaderErrorPrefill},
		{name: "allowed host other port", body: `{}`, hdr: map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().Host + ":1"}, wantStatus: 403, wantHdr: protocol.HeaderErrorPrefill},
		{name: "engine mismatch", body: `{"prompt":"p"}`, hdr: map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String(), protocol.HeaderPrefillerEngine: "sglang"}, wantStatus: 503, wantHdr: protocol.HeaderErrorPrefill},
		{name: "unknown connector", body: `{"prompt":"p"}`, hdr: map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String(), protocol.HeaderPrefillerKVConnector: "mooncake"}, wantStatus: 503, wantHdr: protocol.HeaderErrorPrefill},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(pre.requests()) + len(dec.requests())
			resp, body := env.post(t, "/v1/completions", tt.body, tt.hdr)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, body)
			}
			if tt.wantHdr != "" && resp.Header.Get(tt.wantHdr) != "true" {
				t.Errorf("missing %s", tt.wantHdr)
			}
			var e protocol.OpenAIError
			if err := json.Unmarshal([]byte(body), &e); err != nil || e.Error.Code != tt.wantStatus || e.Error.Message == "" || !strings.Contains(body, `"param":null`) ||
				resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Content-Length") != strconv.Itoa(len(body)) {
				t.Errorf("the sidecar's own %d is not an OpenAI JSON error (%v): %s", tt.wantStatus, resp.Header, body)
			}
			if after := len(pre.requests()) + len(dec.requests()); after != before {
				t.Errorf("a rejected request reached an engine")
			}
		})
	}
	if got := counter(env.metrics.AllowlistRejections.WithLabelValues("prefill")); got != 2 {
		t.Errorf("allow-list rejections %v, want 2", got)
	}
}

func TestDecodeOnlyStripsKVFieldsAndRoutingHeaders(t *testing.T) {
	dec := newFake(t, decodeOK)
	env := startProxy(t, testConfig(dec))
	resp, _ := env.post(t, "/v1/completions",
		`{"model":"m","prompt":"p","kv_transfer_params":{"do_remote_prefill":true,"remote_host":"169.254.169.254"},"bootstrap_host":"x","disaggregated_params":{},"extra":[1]}`,
		map[string]string{protocol.HeaderEncoderHostsPorts: "10.0.0.1:1", protocol.HeaderPrefillerBootstrapPort: "1"})
	if resp.StatusCode != 200 || resp.Header.Get(protocol.HeaderPrefillOutcome) != "skipped" {
		t.Fatalf("status %d outcome %q", resp.StatusCode, resp.Header.Get(protocol.HeaderPrefillOutcome))
	}
	d := dec.only(t)
	for _, k := range []string{"kv_transfer_params", "bootstrap_host", "disaggregated_params"} {
		if _, ok := d.Body[k]; ok {
			t.Errorf("client %s reached the engine", k)
		}
	}
	if d.Body["extra"] == nil {
		t.Error("unknown field dropped")
	}
	for _, h := range protocol.RoutingHeaders {
		if len(d.Header.Values(h)) > 0 {
			t.Errorf("routing header %s reached the engine", h)
		}
	}
}

func TestPassthroughOtherRoutes(t *testing.T) {
	dec := newFake(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		jsonAnswer(w, 200, map[string]any{"path": r.URL.Path, "query": r.URL.RawQuery, "leak": r.Header.Get(protocol.HeaderPrefillerHostPort)})
	})
	env := startProxy(t, testConfig(dec))
	req, _ := http.NewRequest(http.MethodGet, env.srv.URL+"/v1/models?x=1", nil)
	req.Header.Set(protocol.HeaderPrefillerHostPort, "10.0.0.1:1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	d := dec.only(t)
	if resp.StatusCode != 200 || d.Path != "/v1/models" || len(d.Header.Values(protocol.HeaderPrefillerHostPort)) > 0 {
		t.Fatalf("passthrough: %d %+v", resp.StatusCode, d)
	}
}
