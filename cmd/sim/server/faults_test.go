package server

import (
	"context"
	"net/http"
	"strings"
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
