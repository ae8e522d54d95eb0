package hostile

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

// rawStatus writes one raw HTTP/1.1 request (header values Go's client would refuse to send)
// and returns the status code the server answered.
func rawStatus(t *testing.T, addr, header string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + header +
		fmt.Sprintf("Content-Length: %d\r\nConnection: close\r\n\r\n%s", len(chat), chat)
	if _, err := io.WriteString(c, req); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: no answer: %v", header, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Control characters in header values (bare CR, NUL, other C0 controls, DEL) are refused
// with 400 at the gateway and at the sidecar, routing headers included; HTAB is legal.
func TestControlCharactersInHeaders(t *testing.T) {
	l := startLab(t, "127.0.93")
	sidecar := ""
	for _, p := range l.Plan.Pods {
		if p.HasSidecar() {
			sidecar = p.Endpoint()
		}
	}
	prefill := l.Plan.Pods[0].EngineAddr()
	bad := []string{
		"X-Note: a\rb\r\n",
		"X-Note: a\x00b\r\n",
		"X-Note: a\x01b\r\n",
		"X-Note: a\x7fb\r\n",
		"X-Prefiller-Host-Port: " + prefill + "\x00\r\n",
		"X-Prefiller-Host-Port: " + prefill + "\rX-Evil: 1\r\n",
		"X-Encoder-Hosts-Ports: " + prefill + "\x0b\r\n",
	}
	for _, addr := range []string{strings.TrimPrefix(l.URL, "http://"), sidecar} {
		for _, h := range bad {
			if code := rawStatus(t, addr, h); code != http.StatusBadRequest {
				t.Errorf("%s %q: status %d, want 400", addr, h, code)
			}
		}
		if code := rawStatus(t, addr, "X-Note: a\tb\r\n"); code != http.StatusOK {
			t.Errorf("%s: HTAB in a value: status %d, want 200", addr, code)
		}
	}
}

// recorder is a fake engine that records every body it receives and answers a minimal
// OpenAI chat completion (prefill legs get no KV parameters back, so the sidecar's default
// policy falls back to a local prefill and the decode engine sees the client's body).
type recorder struct {
	mu     sync.Mutex
	bodies [][]byte
	srv    *http.Server
	addr   string
}

func newRecorder(t *testing.T) *recorder {
	t.Helper()
	r := &recorder{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	r.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		if req.Method == http.MethodPost {
			r.mu.Lock()
			r.bodies = append(r.bodies, b)
			r.mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	})}
	go func() { _ = r.srv.Serve(ln) }()
	t.Cleanup(func() { _ = r.srv.Close() })
	return r
}

func (r *recorder) all() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.bodies...)
}

// Unknown JSON fields reach the engines byte for byte on every path through the sidecar
// (decode-only, and both legs of a P/D request): huge numbers, nested objects, escapes.
func TestUnknownFieldsPassThrough(t *testing.T) {
	unknown := map[string]string{
		"x_vendor":      `{"z":1,"a":[1e400,-0.0,"\u00e9\ud83d\ude00"],"nested":{"deep":[[[{"k":null}]]]}}`,
		"huge_int":      `123456789012345678901234567890`,
		"priority_hint": `"high"`,
		"tiny":          `1.0000000000000000000000001e-300`,
	}
	var body strings.Builder
	body.WriteString(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":4,"messages":[{"role":"user","content":"hi"}]`)
	for k, v := range unknown {
		body.WriteString(`,"` + k + `":` + v)
	}
	body.WriteString("}")

	prefill, decode := newRecorder(t), newRecorder(t)
	sp := testsupport.FreePort(t)
	url := fmt.Sprintf("http://127.0.0.1:%d", sp)
	start(t, "sidecar", url+"/sidecar/healthz", "--listen", fmt.Sprintf("127.0.0.1:%d", sp),
		"--engine-url", "http://"+decode.addr, "--allowlist", prefill.addr)

	for _, hdr := range []map[string]string{nil, {"x-prefiller-host-port": prefill.addr}} {
		if code, _, b := post(t, url, hdr, body.String()); code != http.StatusOK {
			t.Fatalf("%v: %d %s", hdr, code, b)
		}
	}
	got := append(prefill.all(), decode.all()...)
	if len(prefill.all()) != 1 || len(decode.all()) != 2 {
		t.Fatalf("want 1 prefill and 2 decode bodies, got %d and %d", len(prefill.all()), len(decode.all()))
	}
	for i, b := range got {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("body %d is not JSON: %v\n%s", i, err, b)
		}
		for k, v := range unknown {
			if !bytes.Equal(m[k], []byte(v)) {
				t.Errorf("body %d: %s = %s, sent %s", i, k, m[k], v)
			}
		}
	}
}
