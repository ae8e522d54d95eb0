package proxy

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
)

func TestSGLangLegs(t *testing.T) {
	release := make(chan struct{})
	pre := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		<-release // prefill finishes only once decode has been sent: the legs are concurrent
		jsonAnswer(w, 200, map[string]any{"choices": []any{}})
	})
	dec := newFake(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		close(release)
		decodeOK(w, r, b)
	})
	// The header's bootstrap port differs from the flag's, so it must be allowed itself.
	cfg := testConfig(dec, pre.hp(), protocol.HostPort{Host: "127.0.0.1", Port: 9123})
	cfg.Engine = EngineSGLang
	env := startProxy(t, cfg)
	resp, body := env.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true}`,
		map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String(), protocol.HeaderPrefillerBootstrapPort: "9124"})
	if resp.StatusCode != 403 || resp.Header.Get(protocol.HeaderErrorPrefill) != "true" || len(dec.requests()) != 0 {
		t.Fatalf("bootstrap port outside the allow-list: status %d %s", resp.StatusCode, body)
	}
	resp, body = env.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true,"rid":"client-rid","max_tokens":9}`,
		map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String(), protocol.HeaderPrefillerBootstrapPort: "9123",
			"X-Request-Id": "req-1"})
	if resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	testsupport.Eventually(t, 5*time.Second, "a background effect", func() bool { return len(pre.requests()) == 1 })
	p, d := pre.only(t), dec.only(t)
	ridRE := regexp.MustCompile(`^req-1-[0-9a-f]{16}$`)
	for _, leg := range []recorded{p, d} {
		if leg.Body["bootstrap_host"] != "127.0.0.1" || leg.Body["bootstrap_port"] != 9123.0 {
			t.Errorf("bootstrap coordinates: %s", leg.Raw)
		}
		if rid, _ := leg.Body["rid"].(string); !ridRE.MatchString(rid) {
			t.Errorf("rid %q does not have the fixed-width suffix", leg.Body["rid"])
		}
	}
	if p.Body["bootstrap_room"] != d.Body["bootstrap_room"] || p.Body["rid"] != d.Body["rid"] {
		t.Errorf("room/rid must be shared: %s vs %s", p.Raw, d.Raw)
	}
	if !strings.Contains(p.Raw, `"bootstrap_room":`) || strings.Contains(p.Raw, `"bootstrap_room":1e`) {
		t.Errorf("room must be an integer literal: %s", p.Raw)
	}
	if p.Body["stream"] != false || p.Body["max_tokens"] != 1.0 || d.Body["stream"] != true || d.Body["max_tokens"] != 9.0 {
		t.Errorf("controls: prefill %s decode %s", p.Raw, d.Raw)
	}
}

func TestSGLangIPv6BootstrapHost(t *testing.T) {
	g := newRidGen()
	a, b := g.next("x"), g.next("x")
	if a == b || len(a) != len(b) || strings.HasPrefix(b, a) {
		t.Fatalf("rids %q %q", a, b)
	}
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	pre := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) { jsonAnswer(w, 200, map[string]any{}) })
	pre.srv.Close()
	pre.srv = httptest.NewUnstartedServer(pre.srv.Config.Handler)
	pre.srv.Listener = ln
	pre.srv.Start()
	dec := newFake(t, decodeOK)
	hp := pre.hp()
	cfg := testConfig(dec, hp)
	cfg.Engine = EngineSGLang
	env := startProxy(t, cfg)
	resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"p"}`, map[string]string{protocol.HeaderPrefillerHostPort: hp.String()})
	if resp.StatusCode != 200 || !strings.HasPrefix(hp.String(), "[::1]:") {
		t.Fatalf("status %d %s (target %s)", resp.StatusCode, body, hp)
	}
	testsupport.Eventually(t, 5*time.Second, "a background effect", func() bool { return len(pre.requests()) == 1 })
	for _, leg := range []recorded{pre.only(t), dec.only(t)} {
		if leg.Body["bootstrap_host"] != "::1" || leg.Body["bootstrap_port"] != 8998.0 {
			t.Fatalf("leg body %s", leg.Raw)
		}
	}
}

// A prefill that fails while the decode waits on its bootstrap fails the request and aborts
// the decode: an error status, or a 200 that produced no KV (SGLang #33507: an aborted prefill
// answering finish_reason length with no token).
func TestSGLangPrefillFailureAbortsDecode(t *testing.T) {
	for _, tc := range []struct {
		name       string
		answer     func(w http.ResponseWriter)
		wantStatus int
	}{
		{"prefill 500", func(w http.ResponseWriter) { jsonAnswer(w, 500, map[string]any{"error": "boom"}) }, 500},
		{"prefill 200 with no token (aborted)", func(w http.ResponseWriter) {
			jsonAnswer(w, 200, map[string]any{"choices": []any{map[string]any{"text": "", "finish_reason": "length"}},
				"usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 0}})
		}, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			decodeArrived := make(chan struct{})
			pre := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				<-decodeArrived
				tc.answer(w)
			})
			dec := newFake(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
				if r.URL.Path == "/abort_request" {
					w.WriteHeader(200)
					return
				}
				close(decodeArrived)
				<-r.Context().Done() // decode waits on the bootstrap forever
			})
			cfg := testConfig(dec, pre.hp())
			cfg.Engine = EngineSGLang
			env := startProxy(t, cfg)
			resp, body := env.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true}`,
				map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()})
			if resp.StatusCode != tc.wantStatus || resp.Header.Get(protocol.HeaderErrorPrefill) != "true" ||
				resp.Header.Get(protocol.HeaderPrefillOutcome) != "failed" || !strings.Contains(body, `"error"`) {
				t.Fatalf("status %d headers %v body %s", resp.StatusCode, resp.Header, body)
			}
			// The fake records an abort when it arrives; the sidecar counts it once the answer is
			// back, so both are awaited.
			aborted := env.metrics.Aborts.WithLabelValues("prefill_failure", "ok")
			testsupport.Eventually(t, 5*time.Second, "two aborts sent and counted", func() bool {
				return len(dec.requestsTo("/abort_request")) == 2 && counter(aborted) == 2
			})
			aborts := dec.requestsTo("/abort_request")
			decRID := dec.requestsTo("/v1/chat/completions")[0].Body["rid"]
			for _, a := range aborts {
				if a.Body["rid"] != decRID {
					t.Errorf("abort rid %v, want %v", a.Body["rid"], decRID)
				}
			}
		})
	}
}

func TestSGLangPrefillFailureAfterDecodeAnswerKeepsStream(t *testing.T) {
	decodeStarted := make(chan struct{})
	pre := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		<-decodeStarted
		jsonAnswer(w, 503, map[string]any{"error": "late"})
	})
	dec := newFake(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"choices\":[]}\n\n"))
		w.(http.Flusher).Flush()
		time.Sleep(50 * time.Millisecond)
		close(decodeStarted)
		time.Sleep(100 * time.Millisecond)
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	})
	cfg := testConfig(dec, pre.hp())
	cfg.Engine = EngineSGLang
	env := startProxy(t, cfg)
	resp, body := env.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true}`,
		map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()})
	if resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("stream must survive a late prefill failure: %d %s", resp.StatusCode, body)
	}
	if n := len(dec.requestsTo("/abort_request")); n != 0 {
		t.Fatalf("no abort after the decode answered; got %d", n)
	}
}

// TestConcurrentDecodeFailureWaitsForPrefill: with concurrent legs a decode that fails before
// its prefill leg has answered is often the consequence of that prefill failing (the KV pull
// failed). The sidecar waits for the prefill outcome and, when the prefill failed, answers
// the prefill failure; when the prefill succeeded, the decode's own error.
func TestConcurrentDecodeFailureWaitsForPrefill(t *testing.T) {
	for _, tc := range []struct {
		name          string
		dropDecode    bool // the decode connection breaks instead of answering a 502
		errorEvent    bool // the decode streams its 502 as the first event after its 200 (SGLang)
		prefillStatus int
		wantStatus    int
		wantErrHeader string
		wantOutcome   string
	}{
		{"decode 502, prefill fails later", false, false, 500, 500, protocol.HeaderErrorPrefill, outcomeFailed},
		{"decode connection lost, prefill fails later", true, false, 503, 503, protocol.HeaderErrorPrefill, outcomeFailed},
		{"decode error event, prefill fails later", false, true, 500, 500, protocol.HeaderErrorPrefill, outcomeFailed},
		{"decode 502, prefill succeeds later", false, false, 200, 502, "", outcomeOK},
		{"decode connection lost, prefill succeeds later", true, false, 200, 502, protocol.HeaderErrorDecode, ""},
		{"decode error event, prefill succeeds later", false, true, 200, 502, protocol.HeaderErrorDecode, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{}) // the prefill answers only after the decode failed
			pre := newFake(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				select {
				case <-release:
				case <-r.Context().Done():
					return
				}
				if tc.prefillStatus != 200 {
					jsonAnswer(w, tc.prefillStatus, map[string]any{"error": "prefill failed"})
					return
				}
				jsonAnswer(w, 200, map[string]any{"choices": []any{}})
			})
			dec := newFake(t, func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				if r.URL.Path == "/abort_request" {
					w.WriteHeader(200)
					return
				}
				if tc.dropDecode {
					panic(http.ErrAbortHandler)
				}
				if tc.errorEvent {
					sseAnswer(w, `{"error":{"object":"error","message":"KV transfer from the prefill pod failed","code":502}}`)
					return
				}
				jsonAnswer(w, 502, map[string]any{"error": "KV transfer from the prefill pod failed"})
			})
			cfg := testConfig(dec, pre.hp())
			cfg.Engine = EngineSGLang
			waiting := make(chan struct{})
			var once sync.Once
			cfg.Log = funcr.New(func(_, args string) {
				if strings.Contains(args, "waiting for the prefill outcome") {
					once.Do(func() { close(waiting) })
				}
			}, funcr.Options{Verbosity: 1})
			env := startProxy(t, cfg)
			type answer struct {
				resp *http.Response
				body string
			}
			answered := make(chan answer, 1)
			go func() {
				req, _ := http.NewRequest(http.MethodPost, env.srv.URL+"/v1/chat/completions",
					strings.NewReader(`{"model":"m","messages":[],"stream":true}`))
				req.Header.Set(protocol.HeaderPrefillerHostPort, pre.hp().String())
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					answered <- answer{body: err.Error()}
					return
				}
				defer func() { _ = resp.Body.Close() }()
				b, _ := io.ReadAll(resp.Body)
				answered <- answer{resp, string(b)}
			}()
			var a answer
			select {
			case <-waiting: // the sidecar holds the decode's failure until the prefill answers
				close(release)
				a = <-answered
			case a = <-answered: // answered before the prefill's outcome was known
				close(release)
			}
			if a.resp == nil {
				t.Fatalf("request failed: %s", a.body)
			}
			h := a.resp.Header
			if a.resp.StatusCode != tc.wantStatus || h.Get(protocol.HeaderPrefillOutcome) != tc.wantOutcome {
				t.Fatalf("status %d outcome %q, want %d %q (body %s)", a.resp.StatusCode, h.Get(protocol.HeaderPrefillOutcome),
					tc.wantStatus, tc.wantOutcome, a.body)
			}
			for _, k := range []string{protocol.HeaderErrorPrefill, protocol.HeaderErrorDecode} {
				if want := k == tc.wantErrHeader; (h.Get(k) == "true") != want {
					t.Errorf("%s = %q, want set %v", k, h.Get(k), want)
				}
			}
			if h.Get(headerErrorCause) == "" {
				t.Errorf("no %s on a %d", headerErrorCause, a.resp.StatusCode)
			}
			diverted := counter(env.metrics.PrefillDiverted.WithLabelValues(string(EngineSGLang), outcomeFailed, classHTTP))
			if want := map[bool]float64{true: 1}[tc.wantOutcome == outcomeFailed]; diverted != want {
				t.Errorf("prefill_diverted_total{outcome=failed,reason=http_status} = %v, want %v", diverted, want)
			}
		})
	}
}
