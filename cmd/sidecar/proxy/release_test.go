package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
)

const testSig = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

func TestPrefillReleaseURL(t *testing.T) {
	ok := "http://10.0.0.9:9090" + protocol.PrefillReleasePath + "?id=req-1&sig=" + testSig
	tests := []struct {
		v    string
		want bool
	}{
		{ok, true},
		{"http://[fd00::9]:9090" + protocol.PrefillReleasePath + "?sig=" + testSig + "&id=a%2Fb", true},
		{"", false},
		{"https://10.0.0.9:9090" + protocol.PrefillReleasePath + "?id=r&sig=" + testSig, false},
		{"http://10.0.0.9" + protocol.PrefillReleasePath + "?id=r&sig=" + testSig, false},          // no port
		{"http://u:p@10.0.0.9:9090" + protocol.PrefillReleasePath + "?id=r&sig=" + testSig, false}, // credentials
		{"http://10.0.0.9:9090/metrics?id=r&sig=" + testSig, false},
		{"http://10.0.0.9:9090" + protocol.PrefillReleasePath + "/../x?id=r&sig=" + testSig, false},
		{"http://10.0.0.9:9090/pdgate/v1/prefill%2Dreleased?id=r&sig=" + testSig, false},
		{"http://10.0.0.9:9090" + protocol.PrefillReleasePath + "?id=r&sig=" + testSig + "&x=1", false},
		{"http://10.0.0.9:9090" + protocol.PrefillReleasePath + "?id=r&id=s&sig=" + testSig, false},
		{"http://10.0.0.9:9090" + protocol.PrefillReleasePath + "?id=&sig=" + testSig, false},
		{"http://10.0.0.9:9090" + protocol.PrefillReleasePath + "?id=r&sig=abc", false},
		{"http://10.0.0.9:9090" + protocol.PrefillReleasePath + "?id=r&sig=" + testSig + "#f", false},
		{ok + "," + ok, false}, // two header values joined
		{"gopher://10.0.0.9:9090" + protocol.PrefillReleasePath + "?id=r&sig=" + testSig, false},
	}
	for _, tt := range tests {
		u, got := prefillReleaseURL(tt.v)
		if got != tt.want {
			t.Errorf("%q: ok=%v, want %v (%q)", tt.v, got, tt.want, u)
		}
		if got && !strings.HasPrefix(u, "http://") {
			t.Errorf("%q: rebuilt as %q", tt.v, u)
		}
	}
}

// fakeEPP records prefill-release callbacks.
type fakeEPP struct {
	srv    *httptest.Server
	mu     sync.Mutex
	calls  []string // method + " " + request URI
	called chan struct{}
	status int
}

func newFakeEPP(t *testing.T, status int) *fakeEPP {
	e := &fakeEPP{called: make(chan struct{}, 16), status: status}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.mu.Lock()
		e.calls = append(e.calls, r.Method+" "+r.URL.RequestURI())
		e.mu.Unlock()
		w.WriteHeader(e.status)
		e.called <- struct{}{}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *fakeEPP) header(id string) string {
	return e.srv.URL + protocol.PrefillReleasePath + "?id=" + id + "&sig=" + testSig
}

func (e *fakeEPP) count() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.calls)
}

// The callback fires when the prefill leg returns, before the decode answer (the decode engine
// here answers only once it has arrived), once per request, in every dialect and whether the
// leg succeeded or failed; neither engine sees the header.
func TestPrefillReleaseCallbackWhenPrefillReturns(t *testing.T) {
	trtPrefill := map[string]any{"disaggregated_params": map[string]any{"request_type": "context_only", "ctx_request_id": 9}, "prompt_token_ids": []any{1, 2}}
	tests := []struct {
		name    string
		engine  Engine
		prefill func(w http.ResponseWriter, r *http.Request, b map[string]any)
		policy  FailurePolicy
		status  int
		outcome string
	}{
		{"vllm ok", EngineVLLM, prefillOK, FailFast, 200, "ok"},
		{"vllm failed, retried, falls back", EngineVLLM, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			jsonAnswer(w, 500, map[string]any{"error": "boom"})
		}, FallbackLocal, 200, "fallback-local"},
		{"sglang ok", EngineSGLang, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			jsonAnswer(w, 200, map[string]any{"choices": []any{}})
		}, FailFast, 200, ""},
		{"trtllm context_first ok", EngineTRTLLM, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
			jsonAnswer(w, 200, trtPrefill)
		}, FailFast, 200, "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			epp := newFakeEPP(t, http.StatusNoContent)
			pre := newFake(t, tt.prefill)
			dec := newFake(t, func(w http.ResponseWriter, r *http.Request, b map[string]any) {
				select {
				case <-epp.called:
				case <-time.After(5 * time.Second):
					jsonAnswer(w, 599, map[string]any{"error": "no prefill-release callback before the decode answer"})
					return
				}
				decodeOK(w, r, b)
			})
			cfg := testConfig(dec, pre.hp(), protocol.HostPort{Host: "127.0.0.1", Port: 8998})
			cfg.Engine, cfg.FailurePolicy, cfg.PrefillReleaseTimeout = tt.engine, tt.policy, time.Second
			env := startProxy(t, cfg)
			resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"hello","max_tokens":4}`, map[string]string{
				protocol.HeaderPrefillerHostPort: pre.hp().String(), protocol.HeaderPrefillRelease: epp.header("req-1"),
				"X-Request-Id": "req-1"})
			if resp.StatusCode != tt.status || (tt.outcome != "" && resp.Header.Get(protocol.HeaderPrefillOutcome) != tt.outcome) {
				t.Fatalf("status %d outcome %q: %s", resp.StatusCode, resp.Header.Get(protocol.HeaderPrefillOutcome), body)
			}
			time.Sleep(50 * time.Millisecond) // a second callback would have landed by now
			if n := epp.count(); n != 1 {
				t.Fatalf("%d callbacks, want 1", n)
			}
			if want := "POST " + protocol.PrefillReleasePath + "?id=req-1&sig=" + testSig; epp.calls[0] != want {
				t.Fatalf("callback %q, want %q", epp.calls[0], want)
			}
			for _, r := range append(pre.requests(), dec.requests()...) {
				if r.Header.Get(protocol.HeaderPrefillRelease) != "" {
					t.Fatalf("an engine saw the callback header on %s", r.Path)
				}
			}
			testsupport.Eventually(t, 5*time.Second, "a background effect", func() bool { return counter(env.metrics.PrefillReleases.WithLabelValues(releaseOK)) == 1 })
		})
	}
}

// A failing, slow or refused callback never fails or holds the request; a header that is not
// an EPP callback is never called.
func TestPrefillReleaseCallbackNeverHurtsTheRequest(t *testing.T) {
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(slow.Close)
	failing := newFakeEPP(t, http.StatusForbidden)
	// An EPP that accepts and drops every connection: a transport error on a port this test
	// keeps, so no other server can take it over (a closed server's port can be reused).
	closedURL := "http://" + testsupport.NewDropper(t, "127.0.0.1:0").Addr()
	elsewhere := newFakeEPP(t, http.StatusNoContent)
	tests := []struct {
		name, header, result string
		timeout              time.Duration
		called               *fakeEPP
	}{
		{"EPP answers 403", failing.header("r"), releaseHTTPError, time.Second, failing},
		{"EPP unreachable", closedURL + protocol.PrefillReleasePath + "?id=r&sig=" + testSig, releaseTransport, time.Second, nil},
		{"EPP too slow", slow.URL + protocol.PrefillReleasePath + "?id=r&sig=" + testSig, releaseTransport, 100 * time.Millisecond, nil},
		{"not a callback URL", elsewhere.srv.URL + "/metrics?id=r&sig=" + testSig, releaseInvalidURL, time.Second, nil},
		{"disabled by a zero timeout", elsewhere.header("r"), "", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pre, dec := newFake(t, prefillOK), newFake(t, decodeOK)
			cfg := testConfig(dec, pre.hp())
			cfg.PrefillReleaseTimeout = tt.timeout
			env := startProxy(t, cfg)
			start := time.Now()
			resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"hello"}`, map[string]string{
				protocol.HeaderPrefillerHostPort: pre.hp().String(), protocol.HeaderPrefillRelease: tt.header})
			if resp.StatusCode != 200 || time.Since(start) > 2*time.Second {
				t.Fatalf("status %d after %s: %s", resp.StatusCode, time.Since(start), body)
			}
			if tt.result != "" {
				testsupport.Eventually(t, 5*time.Second, "a background effect", func() bool { return counter(env.metrics.PrefillReleases.WithLabelValues(tt.result)) == 1 })
			}
			if tt.called != nil {
				testsupport.Eventually(t, 5*time.Second, "a background effect", func() bool { return tt.called.count() == 1 })
			}
			time.Sleep(50 * time.Millisecond)
			if elsewhere.count() != 0 {
				t.Fatalf("called %v", elsewhere.calls)
			}
		})
	}
}
