package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
)

func TestSnowflake(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s := newSnowflake(1023, func() time.Time { return now })
	a, b := s.next(), s.next()
	if a < 1<<42 || b < 1<<42 || a == b || a >= 1<<63-1 {
		t.Fatalf("ids %d %d", a, b)
	}
	early := newSnowflake(5, func() time.Time { return time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC) })
	if id := early.next(); id != (5<<12|1)+1<<42 {
		t.Fatalf("clamped id %d", id)
	}
	late := newSnowflake(0, func() time.Time { return time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC) })
	if id := late.next(); id < 1<<42 || id >= 1<<63-1 {
		t.Fatalf("far-future id %d out of range", id)
	}
}

func TestTRTContextFirst(t *testing.T) {
	tests := []struct {
		name, path, body string
		prefill          map[string]any
		check            func(t *testing.T, pre, dec recorded)
	}{
		{name: "chat, params at top level", path: "/v1/chat/completions",
			body:    `{"model":"m","messages":[],"max_tokens":5,"max_completion_tokens":5,"stream":true}`,
			prefill: map[string]any{"disaggregated_params": map[string]any{"request_type": "context_only", "first_gen_tokens": []any{7}, "ctx_request_id": 99}, "prompt_token_ids": []any{1, 2, 3}},
			check: func(t *testing.T, pre, dec recorded) {
				dp := pre.Body["disaggregated_params"].(map[string]any)
				if dp["request_type"] != "context_only" || dp["disagg_request_id"].(float64) < 1<<42 {
					t.Errorf("context params %v", dp)
				}
				if _, ok := pre.Body["max_completion_tokens"]; ok || pre.Body["max_tokens"] != 1.0 || pre.Body["stream"] != false {
					t.Errorf("context controls %s", pre.Raw)
				}
				g := dec.Body["disaggregated_params"].(map[string]any)
				if g["request_type"] != "generation_only" || g["ctx_request_id"] != 99.0 || g["first_gen_tokens"] == nil {
					t.Errorf("generation params %v", g)
				}
				if !strings.Contains(dec.Raw, `"prompt_token_ids":[1,2,3]`) || dec.Body["stream"] != true || dec.Body["max_tokens"] != 5.0 {
					t.Errorf("decode body %s", dec.Raw)
				}
			}},
		{name: "completions, params in choices[0]", path: "/v1/completions", body: `{"model":"m","prompt":"hello"}`,
			prefill: map[string]any{"choices": []any{map[string]any{"disaggregated_params": map[string]any{"request_type": "context_only", "opaque_state": "xyz"}}}, "prompt_token_ids": []any{4, 5}},
			check: func(t *testing.T, _, dec recorded) {
				g := dec.Body["disaggregated_params"].(map[string]any)
				if g["request_type"] != "generation_only" || g["opaque_state"] != "xyz" {
					t.Errorf("generation params %v", g)
				}
				if !strings.Contains(dec.Raw, `"prompt":[4,5]`) {
					t.Errorf("completions must carry token ids as prompt: %s", dec.Raw)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pre := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) { jsonAnswer(w, 200, tt.prefill) })
			dec := newFake(t, decodeOK)
			cfg := testConfig(dec, pre.hp())
			cfg.Engine = EngineTRTLLM
			env := startProxy(t, cfg)
			resp, body := env.post(t, tt.path, tt.body, map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()})
			if resp.StatusCode != 200 || resp.Header.Get(protocol.HeaderPrefillOutcome) != "ok" {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			tt.check(t, pre.only(t), dec.only(t))
		})
	}
}

func serverInfoOK(w http.ResponseWriter, r *http.Request, b map[string]any) {
	if r.URL.Path == "/server_info" {
		jsonAnswer(w, 200, map[string]any{"disaggregated_params": map[string]any{"ctx_info_endpoint": []any{"tcp://10.0.0.5:7777"}, "ctx_dp_rank": 0, "encoded_opaque_state": "b64=="}})
		return
	}
	jsonAnswer(w, 200, map[string]any{"choices": []any{}})
}

func TestTRTGenerationFirst(t *testing.T) {
	pre := newFake(t, serverInfoOK)
	dec := newFake(t, decodeOK)
	cfg := testConfig(dec, pre.hp())
	cfg.Engine, cfg.TRTSchedule = EngineTRTLLM, GenerationFirst
	env := startProxy(t, cfg)
	for i := 0; i < 2; i++ {
		resp, body := env.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true}`,
			map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()})
		if resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	testsupport.Eventually(t, 5*time.Second, "a background effect", func() bool { return len(pre.requestsTo("/v1/chat/completions")) == 2 })
	if n := len(pre.requestsTo("/server_info")); n != 1 {
		t.Errorf("server_info fetched %d times, want 1 (cached)", n)
	}
	ctxLeg := pre.requestsTo("/v1/chat/completions")[0]
	genLeg := dec.requestsTo("/v1/chat/completions")[0]
	c := ctxLeg.Body["disaggregated_params"].(map[string]any)
	g := genLeg.Body["disaggregated_params"].(map[string]any)
	if c["request_type"] != "context_only" || c["schedule_style"] != 1.0 {
		t.Errorf("ctx params %v", c)
	}
	if g["request_type"] != "generation_only" || g["schedule_style"] != 1.0 || g["ctx_info_endpoint"] != "tcp://10.0.0.5:7777" ||
		g["ctx_dp_rank"] != 0.0 || g["encoded_opaque_state"] != "b64==" {
		t.Errorf("gen params %v", g)
	}
	type ids struct {
		DP struct {
			ID  json.Number `json:"disagg_request_id"`
			Ctx json.Number `json:"ctx_request_id"`
		} `json:"disaggregated_params"`
	}
	ctxIDs := map[json.Number]bool{}
	for _, leg := range pre.requestsTo("/v1/chat/completions") {
		var v ids
		_ = json.Unmarshal([]byte(leg.Raw), &v)
		ctxIDs[v.DP.ID] = true
	}
	for _, leg := range dec.requestsTo("/v1/chat/completions") {
		var v ids
		_ = json.Unmarshal([]byte(leg.Raw), &v)
		if v.DP.ID == "" || !ctxIDs[v.DP.ID] || v.DP.Ctx != v.DP.ID {
			t.Errorf("generation ids %q/%q have no matching context leg in %v", v.DP.ID, v.DP.Ctx, ctxIDs)
		}
	}
}

func TestTRTGenerationFirstMissingMetadataFailsBeforeLegs(t *testing.T) {
	var calls atomic.Int32
	pre := newFake(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		if r.URL.Path == "/server_info" {
			jsonAnswer(w, 200, map[string]any{"disaggregated_params": map[string]any{"ctx_info_endpoint": "tcp://x:1"}})
			return
		}
		calls.Add(1)
	})
	dec := newFake(t, decodeOK)
	cfg := testConfig(dec, pre.hp())
	cfg.Engine, cfg.TRTSchedule = EngineTRTLLM, GenerationFirst
	env := startProxy(t, cfg)
	resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"p"}`, map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()})
	if resp.StatusCode != 503 || resp.Header.Get(protocol.HeaderErrorPrefill) != "true" || !strings.Contains(body, "ctx_dp_rank") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if calls.Load() != 0 || len(dec.requests()) != 0 {
		t.Fatal("no leg may be sent when server_info is incomplete")
	}
	if n := len(pre.requestsTo("/server_info")); n != 1 {
		t.Fatalf("server_info calls %d", n)
	}
	// Failures are not cached.
	_, _ = env.post(t, "/v1/completions", `{"model":"m","prompt":"p"}`, map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()})
	if n := len(pre.requestsTo("/server_info")); n != 2 {
		t.Fatalf("failed server_info must not be cached; calls %d", n)
	}
}

func TestParseServerInfo(t *testing.T) {
	tests := []struct {
		in      string
		wantErr bool
		want    ctxInfo
	}{
		{in: `{"disaggregated_params":{"ctx_info_endpoint":"e","ctx_dp_rank":2}}`, want: ctxInfo{endpoint: "e", dpRank: 2}},
		{in: `{"disaggregated_params":{"ctx_info_endpoint":["e"],"ctx_dp_rank":0,"encoded_opaque_state":"s"}}`, want: ctxInfo{endpoint: "e", opaque: json.RawMessage(`"s"`)}},
		{in: `{"disaggregated_params":{"ctx_info_endpoint":["a","b"],"ctx_dp_rank":0}}`, wantErr: true},
		{in: `{"disaggregated_params":{"ctx_info_endpoint":"","ctx_dp_rank":0}}`, wantErr: true},
		{in: `{"disaggregated_params":{"ctx_info_endpoint":"e"}}`, wantErr: true},
		{in: `{"disaggregated_params":{"ctx_info_endpoint":"e","ctx_dp_rank":-1}}`, wantErr: true},
		{in: `{"disaggregated_params":{"ctx_info_endpoint":"e","ctx_dp_rank":1.5}}`, wantErr: true},
		{in: `{}`, wantErr: true},
		{in: `[]`, wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseServerInfo([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: err %v", tt.in, err)
			continue
		}
		if !tt.wantErr && (got.endpoint != tt.want.endpoint || got.dpRank != tt.want.dpRank || string(got.opaque) != string(tt.want.opaque)) {
			t.Errorf("%s: got %+v", tt.in, got)
		}
	}
}

func FuzzParseServerInfo(f *testing.F) {
	f.Add([]byte(`{"disaggregated_params":{"ctx_info_endpoint":"e","ctx_dp_rank":2}}`))
	f.Add([]byte(`{"disaggregated_params":{"ctx_info_endpoint":["e"],"ctx_dp_rank":99999999999999999999}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := parseServerInfo(b)
		if err == nil && (info.endpoint == "" || info.dpRank < 0) {
			t.Fatalf("accepted invalid info %+v from %q", info, b)
		}
	})
}
