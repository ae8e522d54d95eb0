package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Every per-profile sidecar knob the EPP can send (protocol.SidecarKnobNames, the
// routingConfig.pd fields docs/aibrix-knobs.md lists for the sidecar) changes what this
// request does, against flags that would behave otherwise: no knob is accepted and ignored.
func TestSidecarKnobHeaderChangesBehaviour(t *testing.T) {
	// pause outlasts the knobs' 1 s timeouts; false when the sidecar gave up waiting first.
	pause := func(r *http.Request) bool {
		select {
		case <-time.After(1500 * time.Millisecond):
			return true
		case <-r.Context().Done():
			return false
		}
	}
	slowPrefill := func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		if pause(r) {
			prefillOK(w, r, b)
		}
	}
	slowFirstChunk := func(w http.ResponseWriter, r *http.Request, b map[string]any) {
		if pause(r) {
			decodeOK(w, r, b)
		}
	}
	stallAfterFirst := func(w http.ResponseWriter, r *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: {\"choices\":[]}\n\n"))
		w.(http.Flusher).Flush()
		if pause(r) {
			_, _ = w.Write([]byte("data: [DONE]\n\n"))
		}
	}
	type outcome struct {
		status int
		body   string
		aborts int
	}
	cases := map[string]struct {
		knobs   string
		engine  Engine
		stream  bool
		prefill func(w http.ResponseWriter, r *http.Request, b map[string]any)
		decode  func(w http.ResponseWriter, r *http.Request, b map[string]any)
		// check says whether the outcome shows the knob (with=true) or the flag (with=false).
		check func(o outcome, with bool) bool
	}{
		protocol.KnobPrefillRequestTimeout: {knobs: "prefillRequestTimeout=1", prefill: slowPrefill, decode: decodeOK,
			check: func(o outcome, with bool) bool {
				return (o.status == 503 && strings.Contains(o.body, "timeout")) == with
			}},
		protocol.KnobDecodeFirstResponseTimeout: {knobs: "decodeFirstResponseTimeout=1", stream: true, prefill: prefillOK, decode: slowFirstChunk,
			check: func(o outcome, with bool) bool { return (o.status == 504) == with }},
		protocol.KnobDecodeResponseTimeout: {knobs: "decodeResponseTimeout=1", prefill: prefillOK, decode: slowFirstChunk,
			check: func(o outcome, with bool) bool { return (o.status == 504) == with }},
		protocol.KnobDecodeStreamIdleTimeout: {knobs: "decodeStreamIdleTimeout=1", stream: true, prefill: prefillOK, decode: stallAfterFirst,
			check: func(o outcome, with bool) bool { return strings.Contains(o.body, "[DONE]") != with }},
		protocol.KnobDecodeAbortTimeout: {knobs: "decodeAbortTimeout=0", engine: EngineSGLang, prefill: failingPrefill, decode: hangingDecode,
			check: func(o outcome, with bool) bool { return (o.aborts == 0) == with }},
		protocol.KnobDecodeAbortRetryDelay: {knobs: "decodeAbortRetryDelay=0", engine: EngineSGLang, prefill: failingPrefill, decode: hangingDecode,
			check: func(o outcome, with bool) bool { return (o.aborts == 1) == with }},
	}
	for _, name := range protocol.SidecarKnobNames {
		if _, ok := cases[name]; !ok {
			t.Errorf("knob %s has no behaviour case", name)
		}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, with := range []bool{false, true} {
				pre, dec := newFake(t, tc.prefill), newFake(t, tc.decode)
				cfg := testConfig(dec, pre.hp())
				if tc.engine != "" {
					cfg.Engine = tc.engine
				}
				cfg.SkipPrefillRetryOnce = true
				hdr := map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String()}
				if with {
					hdr[protocol.HeaderSidecarKnobs] = tc.knobs
				}
				env := startProxy(t, cfg)
				body := `{"model":"m","prompt":"p"}`
				if tc.stream {
					body = `{"model":"m","prompt":"p","stream":true}`
				}
				resp, got := env.post(t, "/v1/completions", body, hdr)
				o := outcome{status: resp.StatusCode, body: got}
				if cfg.Engine == EngineSGLang {
					time.Sleep(100 * time.Millisecond) // the second abort follows the 10 ms flag delay
					o.aborts = len(dec.requestsTo("/abort_request"))
				}
				if !tc.check(o, with) {
					t.Errorf("header %v: status %d aborts %d body %.200s", with, o.status, o.aborts, o.body)
				}
			}
		})
	}
}

func failingPrefill(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
	jsonAnswer(w, 500, map[string]any{})
}

// hangingDecode never answers an inference request (SGLang waits for KV that never comes) and
// accepts /abort_request.
func hangingDecode(w http.ResponseWriter, r *http.Request, _ map[string]any) {
	if r.URL.Path == "/abort_request" {
		w.WriteHeader(http.StatusOK)
		return
	}
	select {
	case <-r.Context().Done():
	case <-time.After(3 * time.Second):
	}
}

// An invalid item is dropped (its flag applies), counted, and never reaches the engine.
func TestSidecarKnobHeaderInvalid(t *testing.T) {
	pre, dec := newFake(t, prefillOK), newFake(t, decodeOK)
	env := startProxy(t, testConfig(dec, pre.hp()))
	resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"p"}`, map[string]string{
		protocol.HeaderPrefillerHostPort: pre.hp().String(), protocol.HeaderSidecarKnobs: "prefillRequestTimeout=0,bogus=1"})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if counter(env.metrics.KnobRejections) != 1 {
		t.Fatalf("rejections %v", counter(env.metrics.KnobRejections))
	}
	for _, leg := range append(pre.requests(), dec.requests()...) {
		if leg.Header.Get(protocol.HeaderSidecarKnobs) != "" {
			t.Fatal("the knob header reached an engine")
		}
	}
}
