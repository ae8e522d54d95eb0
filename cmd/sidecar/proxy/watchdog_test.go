package proxy

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
)

// hang blocks until the request is cancelled (the sidecar gave up on it).
func hang(r *http.Request) { <-r.Context().Done() }

func TestDecodeWatchdog(t *testing.T) {
	short := 100 * time.Millisecond
	tests := []struct {
		name       string
		engine     Engine
		stream     bool
		set        func(c *Config)
		decode     func(w http.ResponseWriter, r *http.Request, b map[string]any)
		wantStatus int
		wantCut    bool // 200 whose body ends with a transport error
		wantPhase  string
		headersOut string
	}{
		{name: "first response: headers alone do not count", stream: true,
			set: func(c *Config) { c.FirstResponseTimeout = short },
			decode: func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				w.Header().Set("Content-Type", "text/event-stream")
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				hang(r)
			}, wantStatus: 504, wantPhase: phaseFirst, headersOut: "false"},
		{name: "stream idle cuts the stream", stream: true,
			set: func(c *Config) { c.StreamIdleTimeout = short },
			decode: func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				sseAnswer(w, `{"choices":[{"delta":{"content":"a"}}]}`)
				hang(r)
			}, wantStatus: 200, wantCut: true, wantPhase: phaseIdle, headersOut: "true"},
		{name: "non-stream response timeout", stream: false,
			set: func(c *Config) { c.ResponseTimeout = short },
			decode: func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				w.WriteHeader(200)
				w.(http.Flusher).Flush()
				hang(r)
			}, wantStatus: 504, wantPhase: phaseResponse, headersOut: "false"},
		{name: "steady stream under the idle timeout", stream: true,
			set: func(c *Config) { c.StreamIdleTimeout = 2 * time.Second; c.FirstResponseTimeout = 2 * time.Second },
			decode: func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
				w.Header().Set("Content-Type", "text/event-stream")
				for i := 0; i < 10; i++ {
					_, _ = io.WriteString(w, "data: {}\n\n")
					w.(http.Flusher).Flush()
					time.Sleep(10 * time.Millisecond)
				}
			}, wantStatus: 200},
		{name: "sglang watchdog aborts", engine: EngineSGLang, stream: true,
			set: func(c *Config) { c.FirstResponseTimeout = short },
			decode: func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
				if r.URL.Path == "/abort_request" {
					return
				}
				hang(r)
			}, wantStatus: 504, wantPhase: phaseFirst, headersOut: "false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pre := newFake(t, prefillOK)
			dec := newFake(t, tt.decode)
			cfg := testConfig(dec, pre.hp())
			if tt.engine != "" {
				cfg.Engine = tt.engine
			}
			tt.set(&cfg)
			env := startProxy(t, cfg)
			body := `{"model":"m","prompt":"p","stream":` + map[bool]string{true: "true", false: "false"}[tt.stream] + `}`
			req, _ := http.NewRequest(http.MethodPost, env.srv.URL+"/v1/completions", strings.NewReader(body))
			req.Header.Set(protocol.HeaderPrefillerHostPort, pre.hp().String())
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, rerr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tt.wantStatus, b)
			}
			if tt.wantStatus == 504 && (resp.Header.Get(protocol.HeaderErrorDecode) != "true" || !strings.Contains(string(b), "timeout")) {
				t.Errorf("504 must carry x-error-pd-decode and a message: %v %s", resp.Header, b)
			}
			if tt.wantCut {
				if rerr == nil || !errors.Is(rerr, io.ErrUnexpectedEOF) {
					t.Errorf("stream must end with a transport error, got %v (body %q)", rerr, b)
				}
				if !strings.Contains(string(b), `"content":"a"`) {
					t.Errorf("tokens before the cut must reach the client: %q", b)
				}
			} else if rerr != nil {
				t.Errorf("read: %v", rerr)
			}
			if tt.wantPhase != "" {
				testsupport.Eventually(t, 5*time.Second, "a background effect", func() bool { return counter(env.metrics.Watchdog.WithLabelValues(tt.wantPhase, tt.headersOut)) == 1 })
			}
			if tt.engine == EngineSGLang {
				testsupport.Eventually(t, 5*time.Second, "a background effect", func() bool {
					return counter(env.metrics.Aborts.WithLabelValues("watchdog_"+tt.wantPhase, "ok")) == 2
				})
			}
		})
	}
}

// TestWatchdogPhases drives the state machine directly.
func TestWatchdogPhases(t *testing.T) {
	fired := make(chan struct{}, 1)
	d := newWatchdog(0, 0, 0, true, func() { fired <- struct{}{} })
	d.start()
	d.chunk()
	d.stop()
	if d.fired() != "" || d.timer != nil {
		t.Fatal("all phases disabled: no timer may run")
	}
	d = newWatchdog(time.Hour, 0, 0, true, func() { fired <- struct{}{} })
	d.start()
	if d.phase != phaseFirst {
		t.Fatalf("phase %q", d.phase)
	}
	d.chunk()
	if d.phase != "" {
		t.Fatalf("first chunk must disarm the first-response phase, phase %q", d.phase)
	}
	d.stop()
	d = newWatchdog(time.Hour, 0, time.Hour, true, func() {})
	d.chunk() // a chunk before start (concurrent prefill still running)
	d.start()
	if d.phase != phaseIdle {
		t.Fatalf("phase %q, want stream_idle", d.phase)
	}
	d.stop()
	d = newWatchdog(time.Hour, time.Hour, time.Hour, false, func() {})
	d.start()
	d.chunk()
	if d.phase != phaseResponse {
		t.Fatalf("non-stream chunks must not change the phase: %q", d.phase)
	}
	d.stop()
}
