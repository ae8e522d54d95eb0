package server

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/sim/batching"
	"github.com/pdgate/pdgate/test/testsupport"
)

func bootstrap(p *Instance, room uint64) map[string]any {
	host, port, _ := net.SplitHostPort(p.BootstrapAddr())
	pn, _ := strconv.Atoi(port)
	return map[string]any{"bootstrap_host": host, "bootstrap_port": pn, "bootstrap_room": room}
}

func TestSGLangBootstrapHandoff(t *testing.T) {
	clk := newPump(t)
	p := startSim(t, clk, Options{Dialect: DialectSGLang, Role: RolePrefill, KVWaitTimeout: Duration{2 * time.Second}})
	d := startSim(t, clk, Options{Dialect: DialectSGLang, Role: RoleDecode, KVWaitTimeout: Duration{2 * time.Second}})
	url := "http://" + d.Addr() + "/v1/chat/completions"
	info := getInfo(t, "http://"+p.Addr()+"/get_server_info")
	if _, port, _ := net.SplitHostPort(p.BootstrapAddr()); strconv.Itoa(int(info["disaggregation_bootstrap_port"].(float64))) != port || info["disaggregation_mode"] != "prefill" {
		t.Fatalf("get_server_info: %v", info)
	}

	if r := post(t, "http://"+p.Addr()+"/v1/chat/completions", chat(longPrompt, 1, bootstrap(p, 7)), nil); r.status != 200 {
		t.Fatalf("prefill leg: %d %s", r.status, r.raw)
	}
	if r := post(t, url, chat(longPrompt, 6, bootstrap(p, 7)), nil); r.status != 200 {
		t.Fatalf("decode leg: %d %s", r.status, r.raw)
	}
	// the same room again: consumed
	if r := post(t, url, chat(longPrompt, 6, bootstrap(p, 7)), nil); r.status != http.StatusGone {
		t.Fatalf("reused room: %d %s", r.status, r.raw)
	}
	// the prefill never comes: the decode fails after the bootstrap wait
	if r := post(t, url, chat(longPrompt, 6, bootstrap(p, 8)), nil); r.status != http.StatusNotFound {
		t.Fatalf("missing prefill leg: %d %s", r.status, r.raw)
	}
	// a failed prefill fails its decode
	fr := post(t, "http://"+p.Addr()+"/v1/chat/completions", chat(longPrompt, 1, bootstrap(p, 9)), map[string]string{HeaderFault: "prefill-fail"})
	if fr.status != 500 {
		t.Fatalf("prefill-fail: %d", fr.status)
	}
	if r := post(t, url, chat(longPrompt, 6, bootstrap(p, 9)), nil); r.status != http.StatusBadGateway {
		t.Fatalf("decode after failed prefill: %d %s", r.status, r.raw)
	}
	// streaming decode: 200 first, then the failure as an SSE error event
	sr := post(t, url, chat(longPrompt, 6, mergeMaps(bootstrap(p, 10), map[string]any{"stream": true})), nil)
	if sr.status != 200 {
		t.Fatalf("streaming decode status %d", sr.status)
	}
	if evs := sseEvents(sr.raw); len(evs) < 2 || !json.Valid([]byte(evs[len(evs)-1])) || field(t, mustObj(t, evs[len(evs)-1]), "error", "code").(float64) != 404 {
		t.Fatalf("streaming decode should end with an error event: %s", sr.raw)
	}
	bad := []map[string]any{
		{"bootstrap_host": "127.0.0.1", "bootstrap_port": 1},                                               // no room
		{"bootstrap_host": "", "bootstrap_port": 1, "bootstrap_room": 1},                                   // empty host
		{"bootstrap_host": "127.0.0.1", "bootstrap_port": 70000, "bootstrap_room": 1},                      // port range
		{"bootstrap_host": "127.0.0.1", "bootstrap_port": 1, "bootstrap_room": "12"},                       // room type
		{"bootstrap_host": "127.0.0.1", "bootstrap_port": 1, "bootstrap_room": 1, "rid": map[string]any{}}, // rid type
	}
	for i, b := range bad {
		if r := post(t, url, chat(longPrompt, 2, b), nil); r.status != 400 {
			t.Errorf("bad bootstrap %d: %d %s", i, r.status, r.raw)
		}
	}
}

func TestSGLangAbortByRIDPrefix(t *testing.T) {
	clk := newPump(t)
	p := startSim(t, clk, Options{Dialect: DialectSGLang, Role: RolePrefill})
	d := startSim(t, clk, Options{Dialect: DialectSGLang, Role: RoleDecode, KVWaitTimeout: Duration{time.Hour}})
	got := make(chan result, 1)
	go func() {
		got <- post(t, "http://"+d.Addr()+"/v1/chat/completions", chat(longPrompt, 4, mergeMaps(bootstrap(p, 42), map[string]any{"rid": "req-1-abcdef"})), nil)
	}()
	for i := 0; d.pullWaiting.Load() == 0; i++ { // wait until the decode waits on its room
		if i > 20000 {
			t.Fatal("decode never started waiting")
		}
		time.Sleep(100 * time.Microsecond)
	}
	if r := post(t, "http://"+d.Addr()+"/abort_request", map[string]any{"rid": "req-1"}, nil); r.status != 200 {
		t.Fatalf("abort_request: %d", r.status)
	}
	r := <-got
	if r.status != 200 || field(t, r.body, "choices", 0, "finish_reason") != "abort" {
		t.Fatalf("aborted request: %d %s", r.status, r.raw)
	}
}

func TestTRTContextFirstAndGenerationFirst(t *testing.T) {
	clk := newPump(t)
	ctxS := startSim(t, clk, Options{Dialect: DialectTRTLLM, Role: RolePrefill, KVWaitTimeout: Duration{2 * time.Second}})
	gen := startSim(t, clk, Options{Dialect: DialectTRTLLM, Role: RoleDecode, KVWaitTimeout: Duration{2 * time.Second}})
	genURL := "http://" + gen.Addr() + "/v1/completions"
	comp := func(extra map[string]any) map[string]any {
		b := map[string]any{"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": longPrompt, "max_tokens": 5}
		return mergeMaps(b, extra)
	}

	// context_first: the ctx answer's disaggregated_params go back verbatim as generation_only
	cr := post(t, "http://"+ctxS.Addr()+"/v1/completions", comp(map[string]any{"max_tokens": 1,
		"disaggregated_params": map[string]any{"request_type": "context_only", "disagg_request_id": 4398046511104}}), nil)
	if cr.status != 200 {
		t.Fatalf("context leg: %d %s", cr.status, cr.raw)
	}
	dp := field(t, cr.body, "choices", 0, "disaggregated_params").(map[string]any)
	if dp["ctx_request_id"].(float64) != 4398046511104 || dp["opaque_state"] == "" || cr.body["prompt_token_ids"] == nil {
		t.Fatalf("context answer: %s", cr.raw)
	}
	genParams := mergeMaps(dp, map[string]any{"request_type": "generation_only"})
	if r := post(t, genURL, comp(map[string]any{"disaggregated_params": genParams}), nil); r.status != 200 {
		t.Fatalf("generation leg: %d %s", r.status, r.raw)
	}
	cr2 := post(t, "http://"+ctxS.Addr()+"/v1/completions", comp(map[string]any{"max_tokens": 1,
		"disaggregated_params": map[string]any{"request_type": "context_only"}}), nil)
	dp2 := field(t, cr2.body, "choices", 0, "disaggregated_params").(map[string]any)
	wrongFirst := mergeMaps(dp2, map[string]any{"request_type": "generation_only", "first_gen_tokens": []int{1}})
	if r := post(t, genURL, comp(map[string]any{"disaggregated_params": wrongFirst}), nil); r.status != http.StatusConflict {
		t.Fatalf("wrong first_gen_tokens: %d %s", r.status, r.raw)
	}

	// generation_first: the gateway reads /server_info and names the ctx endpoint up front
	info := getInfo(t, "http://"+ctxS.Addr()+"/server_info")
	ep := field(t, info, "disaggregated_params", "ctx_info_endpoint").(string)
	id := 4398046511200
	if r := post(t, "http://"+ctxS.Addr()+"/v1/completions", comp(map[string]any{"max_tokens": 1,
		"disaggregated_params": map[string]any{"request_type": "context_only", "disagg_request_id": id, "schedule_style": 1}}), nil); r.status != 200 {
		t.Fatalf("gen-first ctx leg: %d %s", r.status, r.raw)
	}
	genFirst := map[string]any{"request_type": "generation_only", "disagg_request_id": id, "ctx_request_id": id,
		"schedule_style": 1, "ctx_info_endpoint": ep, "ctx_dp_rank": 0}
	if r := post(t, genURL, comp(map[string]any{"disaggregated_params": genFirst}), nil); r.status != 200 {
		t.Fatalf("gen-first generation leg: %d %s", r.status, r.raw)
	}
	genFirst["ctx_request_id"] = id + 1 // no context leg ever ran
	if r := post(t, genURL, comp(map[string]any{"disaggregated_params": genFirst}), nil); r.status != http.StatusNotFound {
		t.Fatalf("missing context leg: %d %s", r.status, r.raw)
	}
	for i, b := range []map[string]any{
		{"request_type": "both"},
		{"request_type": "generation_only", "opaque_state": dp["opaque_state"]},            // no ctx_request_id
		{"request_type": "generation_only", "ctx_request_id": 1},                           // no source
		{"request_type": "generation_only", "ctx_request_id": 1, "ctx_info_endpoint": "x"}, // not host:port
		{"request_type": "generation_only", "ctx_request_id": 1, "opaque_state": "!!"},     // not base64
	} {
		if r := post(t, genURL, comp(map[string]any{"disaggregated_params": b}), nil); r.status != 400 {
			t.Errorf("bad disaggregated_params %d: %d %s", i, r.status, r.raw)
		}
	}
}

// getInfo fetches a server-info endpoint's JSON object.
func getInfo(t *testing.T, url string) map[string]any {
	t.Helper()
	resp, err := testClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var info map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&info)
	return info
}

func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}

func mustObj(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// A streaming SGLang decode answers 200 before its KV arrives, as SGLang's HTTP server does,
// but writes its first chunk (the assistant role) only with the first token, as SGLang's chat
// stream does: body bytes at the client, or at the sidecar's first-chunk phase, mean a token.
// Real time here: the fake clock's pump would run the decode's KV wait out at once.
func TestSGLangDecodeWritesNothingBeforeItsKV(t *testing.T) {
	clk := batching.NewScaledClock(1)
	p := startSim(t, clk, Options{Dialect: DialectSGLang, Role: RolePrefill, KVWaitTimeout: Duration{10 * time.Second}})
	d := startSim(t, clk, Options{Dialect: DialectSGLang, Role: RoleDecode, KVWaitTimeout: Duration{10 * time.Second}})
	req, err := testsupport.JSONRequest(context.Background(), "http://"+d.Addr()+"/v1/chat/completions", nil,
		chat(longPrompt, 4, mergeMaps(bootstrap(p, 21), map[string]any{"stream": true})))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := testClient.Do(req) // returns with the headers
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("streaming decode: status %d before its KV, want 200", resp.StatusCode)
	}
	first := make(chan string, 1)
	go func() {
		buf := make([]byte, 64<<10)
		n, _ := resp.Body.Read(buf)
		first <- string(buf[:n])
	}()
	select {
	case b := <-first:
		t.Fatalf("the decode wrote %q before its KV arrived", b)
	case <-time.After(300 * time.Millisecond):
	}
	if r := post(t, "http://"+p.Addr()+"/v1/chat/completions", chat(longPrompt, 1, bootstrap(p, 21)), nil); r.status != 200 {
		t.Fatalf("prefill leg: %d %s", r.status, r.raw)
	}
	var b string
	select {
	case b = <-first:
	case <-time.After(10 * time.Second):
		t.Fatal("no first chunk after the prefill leg")
	}
	rest, _ := io.ReadAll(resp.Body)
	raw := []byte(b + string(rest))
	if !strings.Contains(b, `"role":"assistant"`) {
		t.Fatalf("first bytes %q: want the assistant role chunk", b)
	}
	if n, _, done := contentDeltas(raw); n == 0 || !done {
		t.Fatalf("stream after the KV: %d tokens, done %v: %s", n, done, raw)
	}
}
