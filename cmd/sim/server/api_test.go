package server

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDeterministicOutputAndPrefixCache(t *testing.T) {
	clk := newPump(t)
	a := startSim(t, clk, Options{Seed: 3})
	b := startSim(t, clk, Options{Seed: 3})
	c := startSim(t, clk, Options{Seed: 4})
	body := chat(strings.Repeat("the same long prompt ", 20), 16, nil)
	ra := post(t, "http://"+a.Addr()+"/v1/chat/completions", body, nil)
	rb := post(t, "http://"+b.Addr()+"/v1/chat/completions", body, nil)
	rc := post(t, "http://"+c.Addr()+"/v1/chat/completions", body, nil)
	if messageText(t, ra.body) != messageText(t, rb.body) || messageText(t, ra.body) == messageText(t, rc.body) {
		t.Fatalf("seeded output: %q %q %q", messageText(t, ra.body), messageText(t, rb.body), messageText(t, rc.body))
	}
	if got := field(t, ra.body, "usage", "prompt_tokens_details", "cached_tokens").(float64); got != 0 {
		t.Fatalf("first request cached %v", got)
	}
	again := post(t, "http://"+a.Addr()+"/v1/chat/completions", body, nil)
	prompt := int(field(t, again.body, "usage", "prompt_tokens").(float64))
	want := float64(min(prompt/16*16, prompt-1))
	if got := field(t, again.body, "usage", "prompt_tokens_details", "cached_tokens").(float64); got != want {
		t.Fatalf("repeat request cached %v tokens, want %v", got, want)
	}
	// without max_tokens the length is a seeded draw: same on both servers
	free := chat("no limit", 0, nil)
	delete(free, "max_tokens")
	fa := post(t, "http://"+a.Addr()+"/v1/chat/completions", free, nil)
	fb := post(t, "http://"+b.Addr()+"/v1/chat/completions", free, nil)
	if field(t, fa.body, "usage", "completion_tokens") != field(t, fb.body, "usage", "completion_tokens") || field(t, fa.body, "choices", 0, "finish_reason") != "stop" {
		t.Fatalf("seeded length: %s vs %s", fa.raw, fb.raw)
	}
}

func TestAPIShapes(t *testing.T) {
	clk := newPump(t)
	in := startSim(t, clk, Options{})
	base := "http://" + in.Addr()
	tests := []struct {
		name string
		path string
		body map[string]any
		ok   func(r result) bool
	}{
		{"completions", "/v1/completions", map[string]any{"prompt": "hi there", "max_tokens": 3},
			func(r result) bool {
				return r.body["object"] == "text_completion" && field(t, r.body, "usage", "completion_tokens").(float64) == 3
			}},
		{"completions token ids", "/v1/completions", map[string]any{"prompt": []int{1, 2, 3, 4, 5}, "max_tokens": 2},
			func(r result) bool { return field(t, r.body, "usage", "prompt_tokens").(float64) == 5 }},
		{"completions stream", "/v1/completions", map[string]any{"prompt": "hi", "max_tokens": 3, "stream": true, "stream_options": map[string]any{"include_usage": true}},
			func(r result) bool {
				ev := sseEvents(r.raw)
				return len(ev) == 6 && ev[len(ev)-1] == "[DONE]" && strings.Contains(ev[len(ev)-2], `"cached_tokens"`)
			}},
		{"responses", "/v1/responses", map[string]any{"input": "hello", "max_output_tokens": 4},
			func(r result) bool {
				return r.body["object"] == "response" && field(t, r.body, "usage", "output_tokens").(float64) == 4 &&
					field(t, r.body, "usage", "input_tokens_details", "cached_tokens") != nil
			}},
		{"responses stream", "/v1/responses", map[string]any{"input": "hello", "max_output_tokens": 2, "stream": true},
			func(r result) bool {
				ev := sseEvents(r.raw)
				return len(ev) == 4 && strings.Contains(ev[3], "response.completed")
			}},
		{"chat stream without usage", "/v1/chat/completions", chat("hey", 2, map[string]any{"stream": true}),
			func(r result) bool {
				n, _, done := contentDeltas(r.raw)
				return n == 2 && done && !strings.Contains(string(r.raw), "usage")
			}},
		{"multimodal chat", "/v1/chat/completions", map[string]any{"messages": []any{map[string]any{"role": "user", "content": []any{
			map[string]any{"type": "text", "text": "what is this"}, map[string]any{"type": "image_url", "image_url": map[string]any{"url": "http://x/cat.png"}}}}}, "max_tokens": 1},
			func(r result) bool {
				return field(t, r.body, "usage", "prompt_tokens").(float64) > float64(in.prof.Encoder.TokensPerItem)
			}},
		{"unknown model", "/v1/chat/completions", chat("x", 1, map[string]any{"model": "nope"}), func(r result) bool { return r.status == 404 }},
		{"bad body", "/v1/chat/completions", map[string]any{"messages": "nope"}, func(r result) bool { return r.status == 400 }},
		{"negative max_tokens", "/v1/completions", map[string]any{"prompt": []int{1}, "max_tokens": -1}, func(r result) bool { return r.status == 400 }},
		{"render completions", "/v1/completions/render", map[string]any{"prompt": "abcdefghi"},
			func(r result) bool {
				var v []map[string]any
				return json.Unmarshal(r.raw, &v) == nil && len(v) == 1 && len(v[0]["token_ids"].([]any)) == 3
			}},
		{"render chat", "/v1/chat/completions/render", chat("abcd", 1, nil),
			func(r result) bool { return len(r.body["token_ids"].([]any)) == 2 }}, // "userabcd" = 8 bytes (plugins/wire/bytetokens chat template)
	}
	for _, tc := range tests {
		r := post(t, base+tc.path, tc.body, nil)
		if r.err != nil || !tc.ok(r) {
			t.Errorf("%s: %d %s", tc.name, r.status, r.raw)
		}
	}
}

func TestSharedStorageCacheHitThreshold(t *testing.T) {
	clk := newPump(t)
	dir := t.TempDir()
	p := startSim(t, clk, Options{KVConnector: ConnectorSharedStorage, SharedStorageDir: dir, Role: RolePrefill})
	d := startSim(t, clk, Options{KVConnector: ConnectorSharedStorage, SharedStorageDir: dir, Role: RoleDecode})
	prompt := strings.Repeat("shared storage prompt ", 30)
	first := post(t, "http://"+d.Addr()+"/v1/chat/completions", chat(prompt, 8, map[string]any{"cache_hit_threshold": 0.8}), nil)
	if first.status != 200 || field(t, first.body, "choices", 0, "finish_reason") != "cache_threshold" {
		t.Fatalf("cold decode should answer cache_threshold: %s", first.raw)
	}
	if r := post(t, "http://"+p.Addr()+"/v1/chat/completions", chat(prompt, 1, map[string]any{"cache_hit_threshold": 0}), nil); r.status != 200 {
		t.Fatalf("prefill: %d %s", r.status, r.raw)
	}
	second := post(t, "http://"+d.Addr()+"/v1/chat/completions", chat(prompt, 8, map[string]any{"cache_hit_threshold": 0.8}), nil)
	if second.status != 200 || field(t, second.body, "choices", 0, "finish_reason") != "length" ||
		field(t, second.body, "usage", "prompt_tokens_details", "cached_tokens").(float64) == 0 {
		t.Fatalf("decode after prefill should load from storage: %s", second.raw)
	}
	if r := post(t, "http://"+d.Addr()+"/v1/chat/completions", chat(prompt, 8, map[string]any{"cache_hit_threshold": 2}), nil); r.status != 400 {
		t.Fatalf("threshold out of range: %d", r.status)
	}
}

func TestEncodeRole(t *testing.T) {
	clk := newPump(t)
	dir := t.TempDir()
	e := startSim(t, clk, Options{Role: RoleEncode, SharedStorageDir: dir})
	item := func(url string) map[string]any {
		return map[string]any{"type": "image_url", "image_url": map[string]any{"url": url}}
	}
	req := func(items ...any) map[string]any {
		return map[string]any{"messages": []any{map[string]any{"role": "user", "content": items}}, "max_tokens": 1, "stream": false}
	}
	if r := post(t, "http://"+e.Addr()+"/v1/chat/completions", req(item("http://img/1.png")), nil); r.status != 200 {
		t.Fatalf("encode: %d %s", r.status, r.raw)
	}
	if r := post(t, "http://"+e.Addr()+"/v1/chat/completions", req(item("http://img/1.png"), item("http://img/2.png")), nil); r.status != 400 {
		t.Fatalf("two items: %d", r.status)
	}
	files, _ := os.ReadDir(filepath.Join(dir, "ec"))
	if len(files) != 1 {
		t.Fatalf("EC cache holds %d items, want 1", len(files))
	}
	// a prefill server sharing the EC cache skips the encoder time for that item
	c := startSim(t, clk, Options{SharedStorageDir: dir})
	body := req(map[string]any{"type": "text", "text": "describe"}, item("http://img/1.png"))
	if r := post(t, "http://"+c.Addr()+"/v1/chat/completions", body, nil); r.status != 200 {
		t.Fatalf("prefill with cached embedding: %d", r.status)
	}
	ttftHit := histSum(t, c, "vllm:time_to_first_token_seconds")
	c2 := startSim(t, clk, Options{})
	body2 := req(map[string]any{"type": "text", "text": "describe"}, item("http://img/never-encoded.png"))
	if r := post(t, "http://"+c2.Addr()+"/v1/chat/completions", body2, nil); r.status != 200 {
		t.Fatalf("prefill without embedding: %d", r.status)
	}
	if diff := histSum(t, c2, "vllm:time_to_first_token_seconds") - ttftHit; diff < c.prof.Encode(1).Seconds()*0.999 {
		t.Fatalf("local encode should add the encoder time: diff %v s", diff)
	}
}

func TestInstancesFileAndRunMany(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "instances.yaml")
	_ = os.WriteFile(path, []byte(`
- {name: p0, port: 0, dialect: sglang, role: prefill, bootstrapPort: 0, timeScale: 100}
- {name: d0, port: 0, dialect: vllm, role: decode, kvTTL: 30s, maxBatch: 4}
`), 0o644)
	all, err := LoadInstancesFile(path)
	if err != nil || len(all) != 2 || all[1].KVTTL.Duration != 30*time.Second || all[1].MaxBatch != 4 {
		t.Fatalf("%v %+v", err, all)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- RunMany(ctx, all) }()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	_ = os.WriteFile(path, []byte("- {name: x, dialect: mlc}\n"), 0o644)
	all, _ = LoadInstancesFile(path)
	if err := RunMany(context.Background(), all); err == nil || !strings.Contains(err.Error(), "dialect") {
		t.Fatalf("bad dialect: %v", err)
	}
	_ = os.WriteFile(path, []byte("- {name: x, bogus: 1}\n"), 0o644)
	if _, err := LoadInstancesFile(path); err == nil {
		t.Fatal("unknown field accepted")
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}`), true)
	f.Add([]byte(`{"prompt":[1,2,3],"max_tokens":1,"stream":true}`), false)
	f.Add([]byte(`{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}`), true)
	f.Add([]byte(`{"prompt":["a","b"]}`), false)
	f.Fuzz(func(t *testing.T, b []byte, isChat bool) {
		api := apiCompletions
		if isChat {
			api = apiChat
		}
		r, err := parseRequest(api, b, 4)
		if err == nil && (len(r.tokens) == 0 || r.promptHash == "") {
			t.Fatalf("accepted a request without prompt tokens: %q", b)
		}
	})
}

func FuzzParseLeg(f *testing.F) {
	f.Add([]byte(`{"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"e","remote_block_ids":[1],"remote_host":"h","remote_port":1,"remote_request_id":"r"}}`), uint8(0))
	f.Add([]byte(`{"bootstrap_host":"h","bootstrap_port":8998,"bootstrap_room":1,"rid":"x"}`), uint8(1))
	f.Add([]byte(`{"disaggregated_params":{"request_type":"generation_only","ctx_request_id":1,"ctx_info_endpoint":["tcp://h:1"]}}`), uint8(2))
	f.Add([]byte(`{"disagg_prefill_resp":{"kv_transfer_params":null},"cache_hit_threshold":0.5}`), uint8(3))
	dialects := []string{DialectVLLM, DialectSGLang, DialectTRTLLM}
	roles := []string{RolePrefill, RoleDecode, RoleCombined}
	f.Fuzz(func(t *testing.T, b []byte, sel uint8) {
		var body map[string]json.RawMessage
		if json.Unmarshal(b, &body) != nil {
			return
		}
		o := Options{Dialect: dialects[int(sel)%3], Role: roles[int(sel/3)%3], AdvertiseHost: "127.0.0.1", Port: 1}
		if _, err := o.complete(); err != nil {
			t.Fatal(err)
		}
		in := &Instance{opts: o, engineID: "e"}
		l, err := in.parseLeg(&simRequest{body: body})
		if err == nil && l.kind == legConsume && (l.endpoint == "" || l.id == "") {
			t.Fatalf("a decode leg without a KV source: %+v from %s", l, b)
		}
	})
}
