package server

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseFaults(t *testing.T) {
	tests := []struct {
		in      string
		want    faults
		wantErr bool
	}{
		{"prefill-fail", faults{prefillFail: true}, false},
		{"prefill-abort", faults{prefillAbort: true}, false},
		{"kv-params-dropped,partial-kv", faults{kvDropped: true, partialKV: true}, false},
		{"wrong-rank, decode-error-race", faults{wrongRank: true, decodeRace: true}, false},
		{"prefill-slow=2s, stall-after=5", faults{prefillSlow: 2 * time.Second, stallAfter: 5}, false},
		{"hang-first-token,drop-connection", faults{hangFirst: true, drop: true}, false},
		{"drop-after=3", faults{dropAfter: 3}, false},
		{"http-503", faults{status: 503}, false},
		{"http-200", faults{}, true},
		{"stall-after=0", faults{}, true},
		{"prefill-slow=-1s", faults{}, true},
		{"explode", faults{}, true},
		{"prefill-fail=1", faults{}, true},
	}
	for _, tc := range tests {
		got, err := parseFaults(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("%q: got %+v, %v", tc.in, got, err)
		}
	}
}

func FuzzParseFaults(f *testing.F) {
	for _, s := range []string{"prefill-fail", "prefill-slow=2s", "stall-after=5,drop-after=1", "http-500", ",,", "=="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		fl, err := parseFaults(s)
		if err == nil && (fl.stallAfter < 0 || fl.dropAfter < 0 || fl.prefillSlow < 0 || (fl.status != 0 && (fl.status < 400 || fl.status > 599))) {
			t.Fatalf("accepted out-of-range fault %+v from %q", fl, s)
		}
	})
}

func TestFaultsOverHTTP(t *testing.T) {
	clk := newPump(t)
	in := startSim(t, clk, Options{Dialect: DialectVLLM})
	url := "http://" + in.Addr() + "/v1/chat/completions"
	stream := map[string]any{"stream": true}

	if r := post(t, url, chat("x", 3, nil), map[string]string{HeaderFault: "http-503"}); r.status != 503 || r.header.Get("x-sim-error") != "fault" {
		t.Errorf("http-503: %d", r.status)
	}
	if r := post(t, url, chat("x", 3, nil), map[string]string{HeaderFault: "bogus"}); r.status != 400 {
		t.Errorf("bad fault header: %d", r.status)
	}
	if r := post(t, url, chat("x", 3, nil), map[string]string{HeaderFault: "drop-connection"}); r.err == nil {
		t.Errorf("drop-connection: got an answer %d", r.status)
	}
	if r := post(t, url, chat("x", 3, nil), map[string]string{HeaderFault: "prefill-fail"}); r.status != 500 {
		t.Errorf("prefill-fail: %d", r.status)
	}
	// SGLang's aborted prefill (#33507): a 200 that generated nothing, finish_reason length
	if r := post(t, url, chat("x", 3, nil), map[string]string{HeaderFault: "prefill-abort"}); r.status != 200 ||
		!strings.Contains(string(r.raw), `"finish_reason":"length"`) || !strings.Contains(string(r.raw), `"completion_tokens":0`) {
		t.Errorf("prefill-abort: %d %s", r.status, r.raw)
	}
	r := post(t, url, chat("drop me", 10, stream), map[string]string{HeaderFault: "drop-after=3"})
	if n, _, done := contentDeltas(r.raw); n != 3 || done {
		t.Errorf("drop-after=3: %d tokens, done=%v, err=%v", n, done, r.err)
	}

	// stall-after and hang-first-token hold the stream until the client leaves (or 10 min)
	for _, tc := range []struct {
		fault string
		want  int
	}{{"stall-after=4", 4}, {"hang-first-token", 0}} {
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan result, 1)
		before := in.sched.Stats().Finished
		go func() {
			got <- postCtx(ctx, t, url, chat("stall "+tc.fault, 12, stream), map[string]string{HeaderFault: tc.fault})
		}()
		// the request finishes inside the engine; the client still has no [DONE]
		for i := 0; in.sched.Stats().Finished == before || in.sched.Stats().Running > 0; i++ {
			if i > 50000 {
				t.Fatalf("%s: engine never finished", tc.fault)
			}
			time.Sleep(100 * time.Microsecond)
		}
		select {
		case r := <-got:
			t.Fatalf("%s: stream ended although it should hang: %s", tc.fault, r.raw)
		default:
		}
		cancel()
		r := <-got
		if n, _, done := contentDeltas(r.raw); done || n > tc.want {
			t.Fatalf("%s: %d tokens reached the client, done=%v", tc.fault, n, done)
		}
	}
	// the stall bound: a hung stream is cut after maxHang of model time
	got := make(chan result, 1)
	go func() {
		got <- post(t, url, chat("hang bound", 3, stream), map[string]string{HeaderFault: "hang-first-token"})
	}()
	for i := 0; clk.Pending() == 0 || func() bool { d, _ := clk.NextIn(); return d <= pumpHorizon }(); i++ {
		if i > 50000 {
			t.Fatal("hang timer never armed")
		}
		time.Sleep(100 * time.Microsecond)
	}
	clk.Advance(maxHang)
	r = <-got
	if n, _, done := contentDeltas(r.raw); n != 0 || done {
		t.Fatalf("hang-first-token: %d tokens, done=%v", n, done)
	}
}

func TestPrefillSlowIsModelTime(t *testing.T) {
	clk := newPump(t)
	in := startSim(t, clk, Options{Dialect: DialectVLLM})
	r := post(t, "http://"+in.Addr()+"/v1/completions", map[string]any{"prompt": strings.Repeat("abcd", 512), "max_tokens": 1},
		map[string]string{HeaderFault: "prefill-slow=2s"})
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.raw)
	}
	want := 2*time.Second + in.prof.PrefillTime(512, 0)
	if got := histSum(t, in, "vllm:time_to_first_token_seconds"); got != want.Seconds() {
		t.Fatalf("TTFT %v s, want 2 s + the 512-token prefill = %v s", got, want.Seconds())
	}
}

func TestFault5xxRateIsSeeded(t *testing.T) {
	clk := newPump(t)
	count := func(seed uint64) int {
		in := startSim(t, clk, Options{Dialect: DialectVLLM, Seed: seed, Fault5xxRate: 0.5})
		n := 0
		for i := 0; i < 20; i++ {
			if post(t, "http://"+in.Addr()+"/v1/chat/completions", chat("x", 1, nil), nil).status == http.StatusInternalServerError {
				n++
			}
		}
		return n
	}
	a, b := count(7), count(7)
	if a != b || a == 0 || a == 20 {
		t.Fatalf("5xx counts for one seed: %d and %d (want equal, strictly between 0 and 20)", a, b)
	}
}

// handoffPair is one dialect's prefill and decode servers and how its legs are sent.
type handoffPair struct {
	dialect string
	pre     *Instance
	dec     *Instance
	// legs sends the prefill leg, then the decode leg built from its answer, both with the
	// fault header (in sequence for SGLang too: the pumped model clock would end a decode's
	// wait for its room at once).
	legs func(t *testing.T, fault string) (pre, dec result)
}

func handoffPairs(t *testing.T) []handoffPair {
	clk := newPump(t)
	prompt := strings.Repeat(longPrompt+" ", 8) // ~220 tokens: 14 KV blocks
	hdr := func(fault string) map[string]string { return map[string]string{HeaderFault: fault} }
	vp := startSim(t, clk, Options{Dialect: DialectVLLM, Role: RolePrefill})
	vd := startSim(t, clk, Options{Dialect: DialectVLLM, Role: RoleDecode})
	sp := startSim(t, clk, Options{Dialect: DialectSGLang, Role: RolePrefill, KVWaitTimeout: Duration{2 * time.Second}})
	sd := startSim(t, clk, Options{Dialect: DialectSGLang, Role: RoleDecode, KVWaitTimeout: Duration{2 * time.Second}})
	tp := startSim(t, clk, Options{Dialect: DialectTRTLLM, Role: RolePrefill})
	td := startSim(t, clk, Options{Dialect: DialectTRTLLM, Role: RoleDecode})
	var room atomic.Uint64
	return []handoffPair{
		{dialect: DialectVLLM, pre: vp, dec: vd, legs: func(t *testing.T, fault string) (result, result) {
			p := post(t, "http://"+vp.Addr()+"/v1/chat/completions", chat(prompt, 1, map[string]any{"kv_transfer_params": prefillParams}), hdr(fault))
			kv, _ := p.body["kv_transfer_params"].(map[string]any)
			return p, post(t, "http://"+vd.Addr()+"/v1/chat/completions", chat(prompt, 6, map[string]any{"kv_transfer_params": kv}), hdr(fault))
		}},
		{dialect: DialectSGLang, pre: sp, dec: sd, legs: func(t *testing.T, fault string) (result, result) {
			b := bootstrap(sp, room.Add(1))
			p := post(t, "http://"+sp.Addr()+"/v1/chat/completions", chat(prompt, 1, b), hdr(fault))
			return p, post(t, "http://"+sd.Addr()+"/v1/chat/completions", chat(prompt, 6, b), hdr(fault))
		}},
		{dialect: DialectTRTLLM, pre: tp, dec: td, legs: func(t *testing.T, fault string) (result, result) {
			p := post(t, "http://"+tp.Addr()+"/v1/chat/completions", chat(prompt, 1, map[string]any{
				"disaggregated_params": map[string]any{"request_type": "context_only"}}), hdr(fault))
			gen := map[string]any{}
			if choices, ok := p.body["choices"].([]any); ok && len(choices) > 0 {
				if dp, ok := choices[0].(map[string]any)["disaggregated_params"].(map[string]any); ok {
					gen["disaggregated_params"] = mergeMaps(dp, map[string]any{"request_type": "generation_only"})
				}
			}
			return p, post(t, "http://"+td.Addr()+"/v1/chat/completions", chat(prompt, 6, gen), hdr(fault))
		}},
	}
}

// TestHandoffFaultsOverHTTP: the handoff faults of every dialect, each leg over real HTTP
// (the fault header goes to both legs, as a sidecar forwards the client's headers).
func TestHandoffFaultsOverHTTP(t *testing.T) {
	usage := func(r result) map[string]any { u, _ := r.body["usage"].(map[string]any); return u }
	cached := func(r result) float64 {
		d, _ := usage(r)["prompt_tokens_details"].(map[string]any)
		v, _ := d["cached_tokens"].(float64)
		return v
	}
	promptTokens := func(r result) float64 { v, _ := usage(r)["prompt_tokens"].(float64); return v }
	for _, hp := range handoffPairs(t) {
		t.Run(hp.dialect, func(t *testing.T) {
			p, d := hp.legs(t, "")
			if p.status != 200 || d.status != 200 || cached(d) != promptTokens(d) {
				t.Fatalf("clean handoff: prefill %d, decode %d with %v of %v prompt tokens cached: %s", p.status, d.status, cached(d), promptTokens(d), d.raw)
			}

			// transfer params dropped: a 200 prefill without handoff fields; a decode that
			// waits on it fails at once, one without them prefills locally
			p, d = hp.legs(t, "kv-params-dropped")
			if _, has := p.body["kv_transfer_params"]; p.status != 200 || has || strings.Contains(string(p.raw), "disaggregated_params") {
				t.Errorf("kv-params-dropped: prefill %d %s", p.status, p.raw)
			}
			if want := map[string]int{DialectSGLang: http.StatusBadGateway}[hp.dialect]; want != 0 && d.status != want {
				t.Errorf("kv-params-dropped: a decode waiting on the handoff answered %d, want %d: %s", d.status, want, d.raw)
			} else if want == 0 && d.status != 200 {
				t.Errorf("kv-params-dropped: a decode without the handoff prefills locally: %d %s", d.status, d.raw)
			}

			// partial KV: the decode reports only the half of the blocks that arrived
			p, d = hp.legs(t, "partial-kv")
			if bs := float64(hp.dec.prof.BlockSize); p.status != 200 || d.status != 200 || cached(d) != float64(int(promptTokens(d))/2/int(bs))*bs || cached(d) == 0 {
				t.Errorf("partial-kv: prefill %d, decode %d reports %v of %v cached", p.status, d.status, cached(d), promptTokens(d))
			}

			// wrong rank: vLLM and TRT-LLM's prefill names a rank it does not have; vLLM's
			// decode recomputes (nothing cached), TRT-LLM's fails; SGLang's decode asks the
			// wrong rank and fails
			p, d = hp.legs(t, "wrong-rank")
			switch hp.dialect {
			case DialectVLLM:
				if r := field(t, p.body, "kv_transfer_params", "remote_dp_rank"); r != 1.0 || d.status != 200 || cached(d) != 0 {
					t.Errorf("wrong-rank: prefill rank %v, decode %d with %v cached", r, d.status, cached(d))
				}
			case DialectTRTLLM:
				if r := field(t, p.body, "choices", 0, "disaggregated_params", "ctx_dp_rank"); r != 1.0 || d.status != http.StatusBadGateway {
					t.Errorf("wrong-rank: context rank %v, generation %d %s", r, d.status, d.raw)
				}
			default:
				if p.status != 200 || d.status != http.StatusBadGateway {
					t.Errorf("wrong-rank: prefill %d, decode %d %s", p.status, d.status, d.raw)
				}
			}

			// the decode's error racing the prefill's: the prefill fails its handoff at once
			// and answers its own error raceDelay later
			p, d = hp.legs(t, "decode-error-race")
			if p.status != http.StatusInternalServerError {
				t.Errorf("decode-error-race: prefill %d", p.status)
			}
			if want := map[bool]int{true: http.StatusBadGateway, false: 200}[hp.dialect == DialectSGLang]; d.status != want {
				// SGLang's decode waits on the failed room; the others get no handoff and
				// prefill by themselves (the fault is the prefill leg's)
				t.Errorf("decode-error-race: decode %d, want %d: %s", d.status, want, d.raw)
			}
		})
	}
}
