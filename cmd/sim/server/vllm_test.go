package server

import (
	"net"
	"net/http"
	"strconv"
	"testing"
)

var prefillParams = map[string]any{"do_remote_decode": true, "do_remote_prefill": false, "remote_engine_id": nil,
	"remote_block_ids": nil, "remote_host": nil, "remote_port": nil}

func TestVLLMNixlHandoff(t *testing.T) {
	clk := newPump(t)
	p := startSim(t, clk, Options{Dialect: DialectVLLM, Role: RolePrefill})
	d := startSim(t, clk, Options{Dialect: DialectVLLM, Role: RoleDecode})
	c := startSim(t, clk, Options{Dialect: DialectVLLM, Role: RoleCombined})

	produce := func() map[string]any {
		r := post(t, "http://"+p.Addr()+"/v1/chat/completions", chat(longPrompt, 1, map[string]any{"kv_transfer_params": prefillParams}), nil)
		if r.status != 200 {
			t.Fatalf("prefill leg: %d %s", r.status, r.raw)
		}
		kv, ok := r.body["kv_transfer_params"].(map[string]any)
		if !ok || kv["do_remote_prefill"] != true || kv["remote_host"] != "127.0.0.1" {
			t.Fatalf("prefill answer lacks kv_transfer_params: %s", r.raw)
		}
		return kv
	}
	decode := func(prompt string, kv map[string]any) result {
		return post(t, "http://"+d.Addr()+"/v1/chat/completions", chat(prompt, 8, map[string]any{"kv_transfer_params": kv}), nil)
	}
	clone := func(kv map[string]any, k string, v any) map[string]any {
		out := map[string]any{}
		for kk, vv := range kv {
			out[kk] = vv
		}
		out[k] = v
		return out
	}

	kv := produce()
	ok := decode(longPrompt, kv)
	if ok.status != 200 {
		t.Fatalf("decode leg: %d %s", ok.status, ok.raw)
	}
	combined := post(t, "http://"+c.Addr()+"/v1/chat/completions", chat(longPrompt, 8, nil), nil)
	if got, want := messageText(t, ok.body), messageText(t, combined.body); got != want || got == "" {
		t.Fatalf("P/D output %q differs from the combined server's %q", got, want)
	}
	prompt := field(t, ok.body, "usage", "prompt_tokens").(float64)
	if cached := field(t, ok.body, "usage", "prompt_tokens_details", "cached_tokens").(float64); cached != prompt {
		t.Fatalf("decode should report the transferred prompt as cached: %v of %v", cached, prompt)
	}

	deadLn, _ := net.Listen("tcp", "127.0.0.1:0")
	deadPort := deadLn.Addr().(*net.TCPAddr).Port
	deadLn.Close()

	tests := []struct {
		name   string
		prompt string
		kv     func() map[string]any
		want   int
	}{
		{"already consumed", longPrompt, func() map[string]any { return kv }, http.StatusGone},
		{"different prompt", "another prompt entirely", func() map[string]any { return produce() }, http.StatusConflict},
		{"unknown request id", longPrompt, func() map[string]any { return clone(produce(), "remote_request_id", "nope") }, http.StatusNotFound},
		{"wrong engine", longPrompt, func() map[string]any { return clone(produce(), "remote_engine_id", "other-engine") }, http.StatusConflict},
		{"tampered blocks", longPrompt, func() map[string]any { return clone(produce(), "remote_block_ids", []int{99999}) }, http.StatusConflict},
		{"prefill server gone", longPrompt, func() map[string]any { return clone(produce(), "remote_port", deadPort) }, http.StatusBadGateway},
		{"port of wrong type", longPrompt, func() map[string]any { return clone(produce(), "remote_port", strconv.Itoa(deadPort)) }, http.StatusBadRequest},
		{"missing block ids", longPrompt, func() map[string]any { return clone(produce(), "remote_block_ids", nil) }, http.StatusBadRequest},
		{"neither direction", longPrompt, func() map[string]any { return clone(produce(), "do_remote_prefill", false) }, http.StatusBadRequest},
	}
	for _, tc := range tests {
		r := decode(tc.prompt, tc.kv())
		if r.status != tc.want {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, r.status, tc.want, r.raw)
		}
		if r.header.Get("x-sim-error") == "" {
			t.Errorf("%s: no x-sim-error header", tc.name)
		}
	}

	// a prefill leg sent to a decode-role server is refused; AIBrix's disagg_prefill_resp works
	if r := post(t, "http://"+d.Addr()+"/v1/chat/completions", chat(longPrompt, 1, map[string]any{"kv_transfer_params": prefillParams}), nil); r.status != 400 {
		t.Fatalf("prefill leg on decode role: %d", r.status)
	}
	pr := post(t, "http://"+p.Addr()+"/v1/chat/completions", chat(longPrompt, 1, map[string]any{"kv_transfer_params": prefillParams}), nil)
	if r := post(t, "http://"+d.Addr()+"/v1/chat/completions", chat(longPrompt, 4, map[string]any{"disagg_prefill_resp": pr.body}), nil); r.status != 200 {
		t.Fatalf("disagg_prefill_resp decode: %d %s", r.status, r.raw)
	}
	// a plain request on a decode-role server prefills locally (the EPP skipped prefill)
	if r := post(t, "http://"+d.Addr()+"/v1/chat/completions", chat("local prefill please", 2, nil), nil); r.status != 200 {
		t.Fatalf("plain decode request: %d %s", r.status, r.raw)
	}
}
