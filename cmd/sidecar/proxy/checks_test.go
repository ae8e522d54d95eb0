package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// prefillProduced answers like a prefill of engine that produced KV for prompt tokens
// (vLLM: over blocks KV blocks, so one block is at most ceil(prompt/blocks) tokens).
func prefillProduced(engine Engine, prompt, blocks int) func(w http.ResponseWriter, r *http.Request, b map[string]any) {
	return func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		body := map[string]any{"choices": []any{map[string]any{"text": "x", "finish_reason": "length"}},
			"usage": map[string]any{"prompt_tokens": prompt, "completion_tokens": 1}}
		switch engine {
		case EngineVLLM:
			ids := make([]any, blocks)
			for i := range ids {
				ids[i] = i
			}
			body["kv_transfer_params"] = map[string]any{"do_remote_prefill": true, "remote_engine_id": "eng-1", "remote_block_ids": ids,
				"remote_host": "10.9.9.9", "remote_port": 5600}
		case EngineTRTLLM:
			body["choices"] = []any{map[string]any{"text": "x", "finish_reason": "length",
				"disaggregated_params": map[string]any{"request_type": "context_only", "ctx_request_id": 7, "opaque_state": "b3BhcXVl"}}}
		}
		jsonAnswer(w, 200, body)
	}
}

// decodeReporting answers like a decode engine whose usage reports prompt tokens of which
// cached came from the KV cache (cached < 0: no prompt_tokens_details).
func decodeReporting(prompt, cached int) func(w http.ResponseWriter, r *http.Request, b map[string]any) {
	return func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if r.URL.Path == "/abort_request" {
			return
		}
		usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": 2}
		if cached >= 0 {
			usage["prompt_tokens_details"] = map[string]any{"cached_tokens": cached}
		}
		if s, _ := body["stream"].(bool); s {
			u := fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":2}`, prompt)
			if cached >= 0 {
				u = fmt.Sprintf(`{"prompt_tokens":%d,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":%d}}`, prompt, cached)
			}
			sseAnswer(w, `{"choices":[{"delta":{"content":"Hel"}}]}`, `{"choices":[{"delta":{"content":"lo"}}]}`, `{"choices":[],"usage":`+u+`}`, "[DONE]")
			return
		}
		jsonAnswer(w, 200, map[string]any{"choices": []any{map[string]any{"text": "Hello", "finish_reason": "stop"}}, "usage": usage})
	}
}

// TestHandoffChecks: the decode's answer must report the prompt the prefill produced KV for,
// and at least that many cached tokens less one KV block. A decode that says otherwise
// decoded on partial KV (or recomputed it): never a clean 200. A JSON answer is held and
// answered 502 with x-error-pd-decode and the cause; a stream already started gets an error
// event and is cut before its usage chunk and [DONE].
func TestHandoffChecks(t *testing.T) {
	const prompt = 400
	tests := []struct {
		name      string
		engine    Engine
		blocks    int // vLLM: the prefill's KV blocks (one block = ceil(400/blocks) tokens of slack)
		decPrompt int
		decCached int // -1: not reported
		stream    bool
		unchecked bool // the benchmark's baseline hook
		wantCause string
	}{
		{name: "vLLM: every prompt token arrived", engine: EngineVLLM, blocks: 25, decPrompt: prompt, decCached: prompt},
		{name: "vLLM: the last, partial block recomputed", engine: EngineVLLM, blocks: 25, decPrompt: prompt, decCached: prompt - 16},
		{name: "vLLM: half the KV arrived", engine: EngineVLLM, blocks: 25, decPrompt: prompt, decCached: prompt / 2, wantCause: causePartialKV},
		{name: "vLLM: half the KV arrived, streaming", engine: EngineVLLM, blocks: 25, decPrompt: prompt, decCached: prompt / 2, stream: true, wantCause: causePartialKV},
		{name: "vLLM: another prompt", engine: EngineVLLM, blocks: 25, decPrompt: prompt + 1, decCached: prompt, wantCause: causePromptMismatch},
		{name: "vLLM: cached tokens not reported (no --enable-prompt-tokens-details)", engine: EngineVLLM, blocks: 25, decPrompt: prompt, decCached: -1},
		{name: "vLLM: checks off", engine: EngineVLLM, blocks: 25, decPrompt: prompt, decCached: 0, unchecked: true},
		{name: "SGLang: every prompt token arrived, streaming", engine: EngineSGLang, decPrompt: prompt, decCached: prompt, stream: true},
		{name: "SGLang: a block size unknown to the sidecar", engine: EngineSGLang, decPrompt: prompt, decCached: prompt - unknownBlockSlack},
		{name: "SGLang: partial KV", engine: EngineSGLang, decPrompt: prompt, decCached: 100, wantCause: causePartialKV},
		{name: "SGLang: partial KV, streaming", engine: EngineSGLang, decPrompt: prompt, decCached: 100, stream: true, wantCause: causePartialKV},
		{name: "TRT-LLM context_first: partial KV", engine: EngineTRTLLM, decPrompt: prompt, decCached: 0, wantCause: causePartialKV},
		{name: "TRT-LLM context_first: every prompt token arrived", engine: EngineTRTLLM, decPrompt: prompt, decCached: prompt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pre := newFake(t, prefillProduced(tt.engine, prompt, tt.blocks))
			dec := newFake(t, decodeReporting(tt.decPrompt, tt.decCached))
			cfg := testConfig(dec, pre.hp())
			cfg.Engine, cfg.uncheckedHandoff = tt.engine, tt.unchecked
			env := startProxy(t, cfg)
			body := `{"model":"m","messages":[{"role":"user","content":"hi"}]` + map[bool]string{true: `,"stream":true}`, false: `}`}[tt.stream]
			resp, got := env.post(t, "/v1/chat/completions", body, map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()})
			legs := counter(env.metrics.Legs.WithLabelValues("decode", string(tt.engine), tt.wantCause))
			switch {
			case tt.wantCause == "":
				if resp.StatusCode != 200 || resp.Header.Get(headerErrorCause) != "" || (tt.stream && !strings.Contains(got, "[DONE]")) {
					t.Fatalf("status %d cause %q: %s", resp.StatusCode, resp.Header.Get(headerErrorCause), got)
				}
				// The decode was asked for the usage chunk the checks read; the client, who
				// did not ask, does not see it.
				asked := strings.Contains(dec.only(t).Raw, `"stream_options":{"include_usage":true}`)
				if tt.stream && (asked == tt.unchecked || strings.Contains(got, `"usage"`) == asked) {
					t.Errorf("decode asked for usage %v, client saw usage %v: %s", asked, strings.Contains(got, `"usage"`), got)
				}
			case tt.stream:
				if resp.StatusCode != 200 || strings.Contains(got, "[DONE]") || !strings.Contains(got, `"error"`) || !strings.Contains(got, `"Hel"`) ||
					strings.Contains(got, `"usage"`) {
					t.Fatalf("a stream failing the check must end in an error event, without its usage chunk or [DONE]: %d %s", resp.StatusCode, got)
				}
			default:
				if resp.StatusCode != 502 || resp.Header.Get(protocol.HeaderErrorDecode) != "true" || resp.Header.Get(headerErrorCause) != tt.wantCause ||
					!strings.Contains(got, tt.wantCause) || strings.Contains(got, "Hello") {
					t.Fatalf("status %d headers %v: %s", resp.StatusCode, resp.Header, got)
				}
			}
			if tt.wantCause != "" && legs != 1 {
				t.Errorf("pdgate_sidecar_legs_total{leg=decode,outcome=%s} = %v, want 1", tt.wantCause, legs)
			}
		})
	}
}

// TestWrongRank: a prefill answer naming a data-parallel rank the local engine does not have
// (vLLM remote_dp_rank, with --data-parallel-size known), or no rank at all (any engine),
// cannot drive the decode's pull: the decode prefills locally (fallback-local) and the answer
// names the cause.
func TestWrongRank(t *testing.T) {
	tests := []struct {
		name   string
		engine Engine
		dpSize int // the local engine's ranks (--data-parallel-size)
		rank   any // what the prefill reports
		// wantCause: "" (the KV is handed over) or wrong_rank
		wantCause string
	}{
		{name: "vLLM: rank inside the 4 ranks", engine: EngineVLLM, dpSize: 4, rank: 3},
		{name: "vLLM: rank 4 of 4", engine: EngineVLLM, dpSize: 4, rank: 4, wantCause: causeWrongRank},
		{name: "vLLM: a negative rank without data-parallel ranks here", engine: EngineVLLM, rank: -1, wantCause: causeWrongRank},
		{name: "vLLM: any rank without data-parallel ranks here (the pool's size is unknown)", engine: EngineVLLM, rank: 9},
		{name: "TRT-LLM: ctx_dp_rank not a number", engine: EngineTRTLLM, rank: "zero", wantCause: causeWrongRank},
		{name: "TRT-LLM: ctx_dp_rank 2", engine: EngineTRTLLM, rank: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pre := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				body := map[string]any{"choices": []any{map[string]any{"text": "x", "finish_reason": "length",
					"disaggregated_params": map[string]any{"request_type": "context_only", "ctx_request_id": 7, "ctx_dp_rank": tt.rank}}},
					"kv_transfer_params": map[string]any{"do_remote_prefill": true, "remote_engine_id": "eng-1", "remote_block_ids": []any{1},
						"remote_host": "10.9.9.9", "remote_port": 5600, "remote_dp_rank": tt.rank}}
				jsonAnswer(w, 200, body)
			})
			dec := newFake(t, decodeOK)
			cfg := testConfig(dec, pre.hp())
			cfg.Engine = tt.engine
			if tt.dpSize > 1 {
				// Every rank's port is the fake's: rank r listens on --engine-url's port + r.
				u, _ := url.Parse(dec.srv.URL)
				port, _ := strconv.Atoi(u.Port())
				r, _ := tt.rank.(int)
				if tt.wantCause != "" {
					r = 0 // the decode prefills locally on --engine-url's rank
				}
				cfg.EngineURL = &url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", port-r)}
				cfg.DataParallel = DataParallel{Size: tt.dpSize, ListenPort: 8000}
			}
			env := startProxy(t, cfg)
			resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"p"}`, map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()})
			wantOutcome := map[bool]string{true: outcomeFallback, false: outcomeOK}[tt.wantCause != ""]
			if resp.StatusCode != 200 || resp.Header.Get(protocol.HeaderPrefillOutcome) != wantOutcome || resp.Header.Get(headerErrorCause) != tt.wantCause {
				t.Fatalf("status %d outcome %q cause %q, want 200 %q %q: %s", resp.StatusCode, resp.Header.Get(protocol.HeaderPrefillOutcome),
					resp.Header.Get(headerErrorCause), wantOutcome, tt.wantCause, body)
			}
			d := dec.only(t)
			_, handed := d.Body["kv_transfer_params"]
			if tt.engine == EngineTRTLLM {
				_, handed = d.Body["disaggregated_params"]
			}
			if handed != (tt.wantCause == "") {
				t.Fatalf("decode leg carries the handoff = %v: %s", handed, d.Raw)
			}
			if tt.wantCause != "" && counter(env.metrics.PrefillDiverted.WithLabelValues(string(tt.engine), outcomeFallback, causeWrongRank)) != 1 {
				t.Error("pdgate_sidecar_prefill_diverted_total{outcome=fallback-local,reason=wrong_rank} not counted")
			}
		})
	}
}

func TestBlockCount(t *testing.T) {
	for raw, want := range map[string]int{`[1,2,3]`: 3, ` [ 7 ] `: 1, `[[1,2],[3,4]]`: 2, `[]`: 0, `[[]]`: 0, `7`: 0, `null`: 0, ``: 0} {
		if got := blockCount([]byte(raw)); got != want {
			t.Errorf("blockCount(%s) = %d, want %d", raw, got, want)
		}
	}
}

// A streaming decode leg asks for the usage chunk: the key is added to a body without
// stream_options, merged into the client's own, and left alone when the client asked.
func TestAskUsage(t *testing.T) {
	for _, tc := range []struct{ client, want string }{
		{`{"model":"m","stream":true}`, `{"stream_options":{"include_usage":true},"model":"m","stream":true}`},
		{`{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false}}`,
			`{"model":"m","stream":true,"stream_options":{"continuous_usage_stats":false,"include_usage":true}}`},
		{`{"model":"m","stream":true,"stream_options":{"include_usage":true}}`, `{"model":"m","stream":true,"stream_options":{"include_usage":true}}`},
	} {
		obj, err := jsonbody.Parse([]byte(tc.client))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := askUsage(&request{obj: obj, stream: true, api: APIChat}, []byte(tc.client))
		if string(got) != tc.want {
			t.Errorf("%s → %s, want %s", tc.client, got, tc.want)
		}
	}
}
