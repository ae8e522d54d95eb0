package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

func TestVLLMConnectors(t *testing.T) {
	tests := []struct {
		name      string
		connector Connector
		header    string // x-pdgate-prefiller-kv-connector
		path      string
		body      string
		check     func(t *testing.T, pre, dec recorded, prefillHost string)
	}{
		{name: "nixlv2 chat stream", connector: ConnectorNIXLv2, path: "/v1/chat/completions",
			body: `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":50,"min_tokens":3,"x_unknown":{"b":1,"a":2}}`,
			check: func(t *testing.T, pre, dec recorded, _ string) {
				kv := pre.Body["kv_transfer_params"].(map[string]any)
				if kv["do_remote_decode"] != true || kv["do_remote_prefill"] != false || kv["remote_host"] != nil {
					t.Errorf("prefill kv_transfer_params = %v", kv)
				}
				if pre.Body["stream"] != false || pre.Body["stream_options"] != nil || pre.Body["min_tokens"] != nil ||
					pre.Body["max_tokens"] != 1.0 || pre.Body["max_completion_tokens"] != 1.0 {
					t.Errorf("prefill controls wrong: %s", pre.Raw)
				}
				if !strings.Contains(pre.Raw, `"x_unknown":{"b":1,"a":2}`) || !strings.Contains(dec.Raw, `"x_unknown":{"b":1,"a":2}`) {
					t.Errorf("unknown field not preserved byte for byte")
				}
				if dec.Body["stream"] != true || dec.Body["max_tokens"] != 50.0 || dec.Body["min_tokens"] != 3.0 ||
					dec.Body["stream_options"] == nil || dec.Body["max_completion_tokens"] != nil {
					t.Errorf("decode must carry the client's stream and limits: %s", dec.Raw)
				}
				kv = dec.Body["kv_transfer_params"].(map[string]any)
				if kv["remote_engine_id"] != "eng-1" || kv["remote_host"] != "10.9.9.9" || kv["tp_size"] != 1.0 {
					t.Errorf("decode kv_transfer_params not verbatim: %v", kv)
				}
			}},
		{name: "nixlv2 responses api", connector: ConnectorNIXLv2, path: "/v1/responses",
			body: `{"model":"m","input":"hi","max_output_tokens":20}`,
			check: func(t *testing.T, pre, dec recorded, _ string) {
				if pre.Body["max_output_tokens"] != 1.0 || pre.Body["max_tokens"] != nil {
					t.Errorf("responses prefill limits: %s", pre.Raw)
				}
				if dec.Body["max_output_tokens"] != 20.0 {
					t.Errorf("responses decode limit: %s", dec.Raw)
				}
			}},
		{name: "shfs sets remote_host", connector: ConnectorSHFS, path: "/v1/completions",
			body: `{"model":"m","prompt":"hi"}`,
			check: func(t *testing.T, _, dec recorded, host string) {
				kv := dec.Body["kv_transfer_params"].(map[string]any)
				if kv["remote_host"] != host || kv["remote_engine_id"] != "eng-1" {
					t.Errorf("shfs params: %v", kv)
				}
			}},
		{name: "header overrides connector", connector: ConnectorNIXLv2, header: "SHFS", path: "/v1/completions",
			body: `{"model":"m","prompt":"hi"}`,
			check: func(t *testing.T, _, dec recorded, host string) {
				if kv := dec.Body["kv_transfer_params"].(map[string]any); kv["remote_host"] != host {
					t.Errorf("per-pod connector ignored: %v", kv)
				}
			}},
		{name: "neuron nixl", connector: ConnectorNeuronNIXL, path: "/v1/completions",
			body: `{"model":"m","prompt":"hi","kv_transfer_params":{"remote_host":"evil"}}`,
			check: func(t *testing.T, pre, dec recorded, _ string) {
				if _, ok := pre.Body["kv_transfer_params"]; ok {
					t.Errorf("neuron prefill must not carry kv_transfer_params: %s", pre.Raw)
				}
				resp, ok := dec.Body["disagg_prefill_resp"].(map[string]any)
				if !ok || resp["kv_transfer_params"] == nil {
					t.Errorf("disagg_prefill_resp missing: %s", dec.Raw)
				}
				if _, ok := dec.Body["kv_transfer_params"]; ok {
					t.Errorf("client kv_transfer_params must be stripped: %s", dec.Raw)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pre := newFake(t, prefillOK)
			dec := newFake(t, decodeOK)
			cfg := testConfig(dec, pre.hp())
			cfg.KVConnector = tt.connector
			env := startProxy(t, cfg)
			hdr := map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String(), protocol.HeaderEncoderHostsPorts: "",
				protocol.HeaderPrefillerEngine: "vllm"}
			if tt.header != "" {
				hdr[protocol.HeaderPrefillerKVConnector] = tt.header
			}
			resp, body := env.post(t, tt.path, tt.body, hdr)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if resp.Header.Get(protocol.HeaderPrefillOutcome) != "ok" || resp.Header.Get(protocol.HeaderPrefillDurationMS) == "" {
				t.Errorf("outcome headers: %v", resp.Header)
			}
			p, d := pre.only(t), dec.only(t)
			if p.Path != tt.path || d.Path != tt.path {
				t.Errorf("paths %s %s", p.Path, d.Path)
			}
			for _, h := range protocol.RoutingHeaders {
				if p.Header.Get(h) != "" || d.Header.Get(h) != "" || len(p.Header.Values(h)) > 0 || len(d.Header.Values(h)) > 0 {
					t.Errorf("routing header %s reached an engine", h)
				}
			}
			if p.Header.Get("X-Request-Id") == "" || p.Header.Get("X-Request-Id") != d.Header.Get("X-Request-Id") {
				t.Errorf("x-request-id must be shared by both legs")
			}
			tt.check(t, p, d, pre.hp().Host)
		})
	}
}

func TestVLLMCachedTokensRewrite(t *testing.T) {
	pre := newFake(t, prefillOK)
	dec := newFake(t, decodeOK)
	env := startProxy(t, testConfig(dec, pre.hp()))
	hdr := map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()}
	_, body := env.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true,"stream_options":{"include_usage":true}}`, hdr)
	if !strings.Contains(body, `"prompt_tokens_details":{"cached_tokens":6}`) || !strings.Contains(body, "data: [DONE]") ||
		!strings.Contains(body, `"content":"Hel"`) {
		t.Fatalf("stream not rewritten: %s", body)
	}
	_, body = env.post(t, "/v1/completions", `{"model":"m","prompt":"p"}`, hdr)
	var out map[string]any
	if err := json.Unmarshal([]byte(body), &out); err != nil {
		t.Fatal(err)
	}
	details := out["usage"].(map[string]any)["prompt_tokens_details"].(map[string]any)
	if details["cached_tokens"] != 6.0 {
		t.Fatalf("json body not rewritten: %s", body)
	}
}

func TestSharedStorage(t *testing.T) {
	tests := []struct {
		name         string
		body         string
		decodeFirst  func(w http.ResponseWriter, r *http.Request, b map[string]any)
		wantPrefill  int
		wantDecodes  int
		wantOutcome  string
		wantInAnswer string
	}{
		{name: "decode-first hit", body: `{"model":"m","prompt":"p","cache_hit_threshold":0.5}`,
			decodeFirst: decodeOK, wantPrefill: 0, wantDecodes: 1, wantOutcome: "skipped", wantInAnswer: "Hello"},
		{name: "decode-first miss then prefill", body: `{"model":"m","prompt":"p","cache_hit_threshold":0.5}`,
			decodeFirst: func(w http.ResponseWriter, r *http.Request, b map[string]any) {
				if b["cache_hit_threshold"] == 0.0 {
					decodeOK(w, r, b)
					return
				}
				jsonAnswer(w, 200, map[string]any{"choices": []any{map[string]any{"text": "", "finish_reason": "cache_threshold"}}})
			}, wantPrefill: 1, wantDecodes: 2, wantOutcome: "ok", wantInAnswer: "Hello"},
		{name: "stream miss then prefill", body: `{"model":"m","prompt":"p","stream":true,"cache_hit_threshold":0.5}`,
			decodeFirst: func(w http.ResponseWriter, r *http.Request, b map[string]any) {
				if b["cache_hit_threshold"] == 0.0 {
					decodeOK(w, r, b)
					return
				}
				sseAnswer(w, `{"choices":[{"text":"","finish_reason":"cache_threshold"}]}`, "[DONE]")
			}, wantPrefill: 1, wantDecodes: 2, wantOutcome: "ok", wantInAnswer: "[DONE]"},
		{name: "no threshold: prefill first", body: `{"model":"m","prompt":"p"}`,
			decodeFirst: decodeOK, wantPrefill: 1, wantDecodes: 1, wantOutcome: "ok", wantInAnswer: "Hello"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pre := newFake(t, prefillOK)
			dec := newFake(t, tt.decodeFirst)
			cfg := testConfig(dec, pre.hp())
			cfg.KVConnector = ConnectorSharedStorage
			env := startProxy(t, cfg)
			resp, body := env.post(t, "/v1/completions", tt.body, map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()})
			if resp.StatusCode != 200 || !strings.Contains(body, tt.wantInAnswer) || strings.Contains(body, "cache_threshold") {
				t.Fatalf("status %d body %s", resp.StatusCode, body)
			}
			if got := len(pre.requests()); got != tt.wantPrefill {
				t.Errorf("prefills %d, want %d", got, tt.wantPrefill)
			}
			decs := dec.requests()
			if len(decs) != tt.wantDecodes {
				t.Fatalf("decodes %d, want %d", len(decs), tt.wantDecodes)
			}
			if tt.wantPrefill > 0 {
				p := pre.only(t)
				if p.Body["cache_hit_threshold"] != 0.0 || p.Body["max_tokens"] != 1.0 {
					t.Errorf("prefill body %s", p.Raw)
				}
				if decs[len(decs)-1].Body["cache_hit_threshold"] != 0.0 {
					t.Errorf("final decode must disable the threshold: %s", decs[len(decs)-1].Raw)
				}
			}
			if got := resp.Header.Get(protocol.HeaderPrefillOutcome); got != tt.wantOutcome {
				t.Errorf("outcome %q, want %q", got, tt.wantOutcome)
			}
		})
	}
}

// A NIXL prefill answer whose kv_transfer_params cannot drive the decode's pull is treated as
// one without parameters: the decode prefills locally (fallback-local, no_kv_params), never a
// decode that pulls from nowhere.
func TestNIXLHandoffChecked(t *testing.T) {
	good := map[string]any{"do_remote_prefill": true, "remote_engine_id": "eng-1", "remote_block_ids": []any{1, 2}, "remote_host": "10.9.9.9", "remote_port": 5600}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for kk, vv := range good {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	for _, tc := range []struct {
		name        string
		params      map[string]any
		wantOutcome string
	}{
		{"well formed", good, outcomeOK},
		{"nested block ids (per KV-cache group)", with("remote_block_ids", []any{[]any{1, 2}}), outcomeOK},
		{"no engine id", with("remote_engine_id", nil), outcomeFallback},
		{"empty host", with("remote_host", ""), outcomeFallback},
		{"port as quoted digits (Python reads it)", with("remote_port", "5600"), outcomeOK},
		{"port not a number", with("remote_port", "high"), outcomeFallback},
		{"port out of range", with("remote_port", 70000), outcomeFallback},
		{"block ids not a list", with("remote_block_ids", 7), outcomeFallback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pre := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				jsonAnswer(w, 200, map[string]any{"choices": []any{map[string]any{"text": "x", "finish_reason": "length"}},
					"kv_transfer_params": tc.params, "usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 1}})
			})
			dec := newFake(t, decodeOK)
			env := startProxy(t, testConfig(dec, pre.hp()))
			resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"p"}`, map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()})
			if resp.StatusCode != 200 || resp.Header.Get(protocol.HeaderPrefillOutcome) != tc.wantOutcome {
				t.Fatalf("status %d outcome %q, want 200 %q: %s", resp.StatusCode, resp.Header.Get(protocol.HeaderPrefillOutcome), tc.wantOutcome, body)
			}
			_, handed := dec.only(t).Body["kv_transfer_params"]
			if handed != (tc.wantOutcome == outcomeOK) {
				t.Fatalf("decode leg carries kv_transfer_params = %v", handed)
			}
		})
	}
}
