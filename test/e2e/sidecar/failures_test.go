package sidecar

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

// TestWatchdogAgainstSim: a decode engine that never sends its first token gets a clean 504;
// one that stalls mid-stream has its stream cut short.
func TestWatchdogAgainstSim(t *testing.T) {
	tests := []struct {
		name        string
		decodeFault []string
		sidecarArgs []string
		wantStatus  int
		wantPhase   string
	}{
		// The engine answers 200 and then nothing (an engine sends its first chunk with the
		// first token): the first-response phase fires, the idle phase (10 min) never would.
		{name: "first token never comes", decodeFault: []string{"--fault-hang-first-token-rate", "1"},
			sidecarArgs: []string{"--decode-first-response-timeout", "1s", "--decode-stream-idle-timeout", "10m"}, wantStatus: 504, wantPhase: "first_response"},
		{name: "stream stalls", decodeFault: []string{"--fault-stall-after", "3"},
			sidecarArgs: []string{"--decode-stream-idle-timeout", "1s"}, wantStatus: 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pp, dp, sp := testsupport.FreePort(t), testsupport.FreePort(t), testsupport.FreePort(t)
			start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", pp), "--host", "127.0.0.1", "--port", fmt.Sprint(pp), "--role", "prefill", "--time-scale", "20")
			start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", dp),
				append([]string{"--host", "127.0.0.1", "--port", fmt.Sprint(dp), "--role", "decode", "--time-scale", "20"}, tt.decodeFault...)...)
			url := fmt.Sprintf("http://127.0.0.1:%d", sp)
			start(t, "sidecar", url+"/sidecar/healthz", append([]string{"--listen", fmt.Sprintf("127.0.0.1:%d", sp),
				"--engine-url", fmt.Sprintf("http://127.0.0.1:%d", dp), "--allowlist", fmt.Sprintf("127.0.0.1:%d", pp)}, tt.sidecarArgs...)...)
			begin := time.Now()
			res := stream(t, url, map[string]string{"x-prefiller-host-port": fmt.Sprintf("127.0.0.1:%d", pp)}, chatBody)
			if res.status != tt.wantStatus {
				t.Fatalf("status %d, want %d: %s", res.status, tt.wantStatus, res.raw)
			}
			if tt.wantStatus == 504 && (res.header.Get("x-error-pd-decode") != "true" || !strings.Contains(res.raw, tt.wantPhase)) {
				t.Fatalf("504 without x-error-pd-decode or the %s phase: %v %s", tt.wantPhase, res.header, res.raw)
			}
			if tt.wantStatus == 200 && (res.done || res.chunks == 0) {
				t.Fatalf("stalled stream must be cut after its tokens: chunks %d done %v", res.chunks, res.done)
			}
			if d := time.Since(begin); d > 20*time.Second {
				t.Fatalf("the watchdog (1s) did not end the request; it took %v", d)
			}
		})
	}
}

// TestSGLangPrefillFailureDoesNotHang: SGLang's decode waits on a bootstrap room; when the
// prefill fails the client must get an error at once, not wait out the bootstrap.
func TestSGLangPrefillFailureDoesNotHang(t *testing.T) {
	pp, dp, sp, bp := testsupport.FreePort(t), testsupport.FreePort(t), testsupport.FreePort(t), testsupport.FreePort(t)
	start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", pp), "--host", "127.0.0.1", "--port", fmt.Sprint(pp), "--dialect", "sglang",
		"--role", "prefill", "--bootstrap-port", fmt.Sprint(bp), "--fault-prefill-fail-rate", "1", "--time-scale", "20")
	start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", dp), "--host", "127.0.0.1", "--port", fmt.Sprint(dp), "--dialect", "sglang",
		"--role", "decode", "--kv-wait-timeout", "300s", "--time-scale", "1")
	url := fmt.Sprintf("http://127.0.0.1:%d", sp)
	start(t, "sidecar", url+"/sidecar/healthz", "--listen", fmt.Sprintf("127.0.0.1:%d", sp), "--engine", "sglang",
		"--engine-url", fmt.Sprintf("http://127.0.0.1:%d", dp), "--allowlist", fmt.Sprintf("127.0.0.1:%d", pp),
		"--sglang-bootstrap-port", fmt.Sprint(bp), "--decode-abort-retry-delay", "0")
	res := stream(t, url, map[string]string{"x-prefiller-host-port": fmt.Sprintf("127.0.0.1:%d", pp)}, chatBody)
	// The prefill failure and the decode's own handoff error race; either way the client
	// learns of the failure and no stream completes.
	switch {
	case res.status >= 500 && res.header.Get("x-error-pd-prefill") == "true":
	case res.status == 200 && strings.Contains(res.raw, `"error"`) && !res.done:
	default:
		t.Fatalf("status %d headers %v body %s", res.status, res.header, res.raw)
	}
}
