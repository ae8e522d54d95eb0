package hostile

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/test/testsupport"
)

const chat = `{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`

// post sends body to the sidecar's chat endpoint with extra headers.
func post(t *testing.T, url string, hdr map[string]string, body string) (int, http.Header, string) {
	t.Helper()
	return testsupport.PostJSON(t, url+"/v1/chat/completions", hdr, body)
}

// vllmPair starts a vLLM prefill and decode simulator and a sidecar whose allow-list holds
// only the prefill engine; it returns the sidecar URL and the prefill port.
func vllmPair(t *testing.T, sidecarArgs ...string) (url string, prefillPort int) {
	pp, dp, sp := testsupport.FreePort(t), testsupport.FreePort(t), testsupport.FreePort(t)
	start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", pp), "--host", "127.0.0.1", "--port", fmt.Sprint(pp), "--role", "prefill", "--time-scale", "20")
	start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", dp), "--host", "127.0.0.1", "--port", fmt.Sprint(dp), "--role", "decode", "--time-scale", "20")
	url = fmt.Sprintf("http://127.0.0.1:%d", sp)
	start(t, "sidecar", url+"/sidecar/healthz", append([]string{"--listen", fmt.Sprintf("127.0.0.1:%d", sp),
		"--engine-url", fmt.Sprintf("http://127.0.0.1:%d", dp), "--allowlist", fmt.Sprintf("127.0.0.1:%d", pp),
		"--prefill-failure-policy", "fail-fast"}, sidecarArgs...)...)
	return url, pp
}

// Every form an attacker can write into x-prefiller-host-port to reach something other than
// the allowed prefill engine is refused before any connection is made: 403 (or 400 when the
// value is not a host:port) with x-error-pd-prefill, and no trap sees a connection.
func TestSSRFPrefillHeader(t *testing.T) {
	url, pp := vllmPair(t)
	other := newTrap(t, "127.0.0.1:0")                     // another port on the allowed host
	sibling := newTrap(t, fmt.Sprintf("127.0.0.2:%d", pp)) // same port, other IP
	var v6 *testsupport.Dropper
	if ln, err := net.Listen("tcp", fmt.Sprintf("[::1]:%d", pp)); err == nil {
		_ = ln.Close()
		v6 = newTrap(t, fmt.Sprintf("[::1]:%d", pp))
	}
	attacks := []string{
		fmt.Sprintf("127.0.0.1:%d", other.Port()),
		fmt.Sprintf("127.0.0.2:%d", pp),
		fmt.Sprintf("localhost:%d", pp),
		fmt.Sprintf("LOCALHOST.:%d", pp),
		fmt.Sprintf("[::1]:%d", pp),
		fmt.Sprintf("[0:0:0:0:0:0:0:1]:%d", pp),
		fmt.Sprintf("[::ffff:127.0.0.2]:%d", pp),
		fmt.Sprintf("[::ffff:7f00:1]:%d", other.Port()),
		fmt.Sprintf("2130706434:%d", pp),
		fmt.Sprintf("0x7f000002:%d", pp),
		fmt.Sprintf("127.1:%d", other.Port()),
		fmt.Sprintf("http://127.0.0.2:%d/", pp),
		fmt.Sprintf("127.0.0.1:%d@127.0.0.2:%d", pp, pp),
		fmt.Sprintf("127.0.0.2:%d#127.0.0.1:%d", pp, pp),
		fmt.Sprintf("127.0.0.2:%d, 127.0.0.1:%d", pp, pp),
		fmt.Sprintf("127.0.0.1:%d/../admin", pp),
		fmt.Sprintf("127.0.0.1:0%d", pp),
		fmt.Sprintf("127.0.0.1:%d", pp+65536),
	}
	for _, a := range attacks {
		code, h, body := post(t, url, map[string]string{"x-prefiller-host-port": a}, chat)
		if code != http.StatusForbidden && code != http.StatusBadRequest || h.Get("x-error-pd-prefill") != "true" {
			t.Errorf("%q: status %d, x-error-pd-prefill %q, body %s", a, code, h.Get("x-error-pd-prefill"), body)
		}
	}
	// The allowed target still works, so refusals above are the allow-list's doing.
	if code, _, body := post(t, url, map[string]string{"x-prefiller-host-port": fmt.Sprintf("127.0.0.1:%d", pp)}, chat); code != http.StatusOK {
		t.Fatalf("allowed prefill target: %d %s", code, body)
	}
	for name, tr := range map[string]*testsupport.Dropper{"other port": other, "other ip": sibling, "ipv6": v6} {
		if tr != nil && tr.Hits() != 0 {
			t.Errorf("%s trap saw %d connections", name, tr.Hits())
		}
	}
}

// Encoder targets outside the allow-list are dropped (the request proceeds without them)
// and never called.
func TestSSRFEncoderHeader(t *testing.T) {
	url, pp := vllmPair(t)
	tr := newTrap(t, "127.0.0.1:0")
	mm := `{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":4,"messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"https://example.invalid/a.png"}}]}]}`
	hdr := map[string]string{"x-encoder-hosts-ports": fmt.Sprintf("127.0.0.1:%d, localhost:%d,[::1]:%d,127.0.0.3:%d,http://127.0.0.1:%d", tr.Port(), tr.Port(), tr.Port(), pp, tr.Port())}
	code, _, body := post(t, url, hdr, mm)
	if code != http.StatusOK {
		t.Fatalf("refused encoders must be dropped, not fail the request: %d %s", code, body)
	}
	if tr.Hits() != 0 {
		t.Fatalf("trap saw %d connections", tr.Hits())
	}
}

// A prefill target that answers with a redirect is not followed.
func TestSSRFRedirectNotFollowed(t *testing.T) {
	tr := newTrap(t, "127.0.0.1:0")
	redirector := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", tr.Port()), http.StatusTemporaryRedirect)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = redirector.Serve(ln) }()
	t.Cleanup(func() { _ = redirector.Close() })
	dp, sp := testsupport.FreePort(t), testsupport.FreePort(t)
	start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", dp), "--host", "127.0.0.1", "--port", fmt.Sprint(dp), "--role", "decode", "--time-scale", "20")
	url := fmt.Sprintf("http://127.0.0.1:%d", sp)
	start(t, "sidecar", url+"/sidecar/healthz", "--listen", fmt.Sprintf("127.0.0.1:%d", sp),
		"--engine-url", fmt.Sprintf("http://127.0.0.1:%d", dp), "--allowlist", ln.Addr().String(), "--prefill-failure-policy", "fail-fast")
	code, h, body := post(t, url, map[string]string{"x-prefiller-host-port": ln.Addr().String()}, chat)
	if code < 500 || h.Get("x-error-pd-prefill") != "true" {
		t.Errorf("a redirecting prefill must fail the leg: %d %v %s", code, h, body)
	}
	if tr.Hits() != 0 {
		t.Fatalf("redirect followed: trap saw %d connections", tr.Hits())
	}
}

// SGLang: the bootstrap port header must not let a caller point the decode engine at
// another port of an allowed host.
func TestSSRFBootstrapPortHeader(t *testing.T) {
	pp, dp, sp, bp := testsupport.FreePort(t), testsupport.FreePort(t), testsupport.FreePort(t), testsupport.FreePort(t)
	tr := newTrap(t, "127.0.0.1:0")
	start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", pp), "--host", "127.0.0.1", "--port", fmt.Sprint(pp), "--dialect", "sglang",
		"--role", "prefill", "--bootstrap-port", fmt.Sprint(bp), "--time-scale", "20")
	start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", dp), "--host", "127.0.0.1", "--port", fmt.Sprint(dp), "--dialect", "sglang",
		"--role", "decode", "--kv-wait-timeout", "3s", "--time-scale", "20")
	url := fmt.Sprintf("http://127.0.0.1:%d", sp)
	start(t, "sidecar", url+"/sidecar/healthz", "--listen", fmt.Sprintf("127.0.0.1:%d", sp), "--engine", "sglang",
		"--engine-url", fmt.Sprintf("http://127.0.0.1:%d", dp), "--allowlist", fmt.Sprintf("127.0.0.1:%d,127.0.0.1:%d", pp, bp),
		"--sglang-bootstrap-port", fmt.Sprint(bp), "--prefill-failure-policy", "fail-fast", "--decode-abort-retry-delay", "0")
	prefill := fmt.Sprintf("127.0.0.1:%d", pp)
	code, h, body := post(t, url, map[string]string{"x-prefiller-host-port": prefill, "x-pdgate-prefiller-bootstrap-port": fmt.Sprint(tr.Port())}, chat)
	if code != http.StatusForbidden || h.Get("x-error-pd-prefill") != "true" {
		t.Errorf("bootstrap port outside the allow-list: %d %v %s", code, h, body)
	}
	if tr.Hits() != 0 {
		t.Errorf("trap saw %d connections", tr.Hits())
	}
	// The allowed bootstrap port, by header or by flag, still works.
	for _, hdr := range []map[string]string{{"x-prefiller-host-port": prefill, "x-pdgate-prefiller-bootstrap-port": fmt.Sprint(bp)}, {"x-prefiller-host-port": prefill}} {
		if code, _, body := post(t, url, hdr, chat); code != http.StatusOK || strings.Contains(body, `"error"`) {
			t.Errorf("%v: %d %s", hdr, code, body)
		}
	}
}
