package proxy

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
)

// x-pdgate-decoder-port (the decode pod's model.aibrix.ai/port, written by the EPP) moves this
// request's decode leg to that port of the configured engine host; an invalid value is
// ignored (the --engine-url port applies) and counted; the header never reaches an engine.
func TestDecoderPortHeader(t *testing.T) {
	declaredPort := func(f *fake) string { return strconv.Itoa(f.hp().Port) }
	tests := []struct {
		name string
		// value builds the header from the declared engine's fake ("" = absent).
		value    func(declared *fake) string
		method   string // "" = POST /v1/completions
		path     string
		prefill  bool // a P/D request (vLLM prefill leg first)
		declared bool // the decode leg must reach the declared port (else the configured one)
		rejected float64
	}{
		{name: "absent: --engine-url", value: func(*fake) string { return "" }},
		{name: "decode-only goes to the declared port", value: declaredPort, declared: true},
		{name: "P/D decode leg goes to the declared port", value: declaredPort, prefill: true, declared: true},
		{name: "chat path", value: declaredPort, path: "/v1/chat/completions", declared: true},
		{name: "passthrough goes to the declared port", value: declaredPort, method: http.MethodGet, path: "/v1/models", declared: true},
		{name: "port 0 ignored", value: func(*fake) string { return "0" }, rejected: 1},
		{name: "port above 65535 ignored", value: func(*fake) string { return "65536" }, rejected: 1},
		{name: "negative ignored", value: func(*fake) string { return "-1" }, rejected: 1},
		{name: "signed ignored", value: func(f *fake) string { return "+" + declaredPort(f) }, rejected: 1},
		{name: "non-numeric ignored", value: func(*fake) string { return "http" }, rejected: 1},
		{name: "a host is never taken", value: func(f *fake) string { return f.hp().String() }, rejected: 1},
		{name: "two values ignored", value: func(f *fake) string { return declaredPort(f) + "," + declaredPort(f) }, rejected: 1},
		{name: "invalid on passthrough ignored", value: func(*fake) string { return "70000" }, method: http.MethodGet, path: "/v1/models", rejected: 1},
		{name: "invalid on a P/D request ignored", value: func(*fake) string { return "x" }, prefill: true, rejected: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			configured, declared, pre := newFake(t, decodeOK), newFake(t, decodeOK), newFake(t, prefillOK)
			env := startProxy(t, testConfig(configured, pre.hp()))
			path := tt.path
			if path == "" {
				path = "/v1/completions"
			}
			method := tt.method
			if method == "" {
				method = http.MethodPost
			}
			hdr := map[string]string{}
			if v := tt.value(declared); v != "" {
				hdr[protocol.HeaderDecoderPort] = v
			}
			if tt.prefill {
				hdr[protocol.HeaderPrefillerHostPort] = pre.hp().String()
			}
			var resp *http.Response
			if method == http.MethodPost {
				resp, _ = env.post(t, path, `{"model":"m","prompt":"p","messages":[{"role":"user","content":"p"}]}`, hdr)
			} else {
				req, _ := http.NewRequest(method, env.srv.URL+path, nil)
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				var err error
				if resp, err = http.DefaultClient.Do(req); err != nil {
					t.Fatal(err)
				}
				_ = resp.Body.Close()
			}
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			want, other := configured, declared
			if tt.declared {
				want, other = declared, configured
			}
			got := want.only(t)
			if got.Path != path {
				t.Errorf("engine path %s, want %s", got.Path, path)
			}
			if n := len(other.requests()); n != 0 {
				t.Errorf("the other engine port got %d requests", n)
			}
			if tt.prefill && len(pre.requests()) != 1 {
				t.Errorf("prefill got %d requests, want 1", len(pre.requests()))
			}
			for _, leg := range append(append(configured.requests(), declared.requests()...), pre.requests()...) {
				if len(leg.Header.Values(protocol.HeaderDecoderPort)) > 0 {
					t.Errorf("%s reached an engine", protocol.HeaderDecoderPort)
				}
			}
			if got := counter(env.metrics.DecoderPortRejections); got != tt.rejected {
				t.Errorf("rejections %v, want %v", got, tt.rejected)
			}
		})
	}
}

// SGLang's /abort_request goes to the engine that runs the decode: the declared port. (The
// decode leg itself may be canceled before it is sent when the prefill fails first.)
func TestDecoderPortHeaderSGLangAbort(t *testing.T) {
	configured, declared, pre := newFake(t, hangingDecode), newFake(t, hangingDecode), newFake(t, failingPrefill)
	cfg := testConfig(configured, pre.hp())
	cfg.Engine = EngineSGLang
	cfg.SkipPrefillRetryOnce = true
	env := startProxy(t, cfg)
	resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"p"}`, map[string]string{
		protocol.HeaderPrefillerHostPort: pre.hp().String(), protocol.HeaderDecoderPort: strconv.Itoa(declared.hp().Port)})
	if resp.StatusCode/100 == 2 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	testsupport.Eventually(t, 5*time.Second, "a background effect", func() bool { return len(declared.requestsTo("/abort_request")) > 0 })
	time.Sleep(50 * time.Millisecond)
	if n := len(configured.requests()); n != 0 {
		t.Fatalf("the --engine-url port got %d requests (decode leg or abort)", n)
	}
}

// Only the port of --engine-url changes: scheme, host (IPv6 bracketed), path and user info stay.
func TestEngineTarget(t *testing.T) {
	tests := []struct{ base, port, want string }{
		{"http://127.0.0.1:8001", "", "http://127.0.0.1:8001"},
		{"http://127.0.0.1:8001", "9100", "http://127.0.0.1:9100"},
		{"https://engine.local:8001/base", "9100", "https://engine.local:9100/base"},
		{"http://engine", "9100", "http://engine:9100"},
		{"http://[::1]:8001", "9100", "http://[::1]:9100"},
		{"http://u:p@127.0.0.1:8001/x", "1", "http://u:p@127.0.0.1:1/x"},
	}
	for _, tt := range tests {
		t.Run(tt.base+"+"+tt.port, func(t *testing.T) {
			base, err := url.Parse(tt.base)
			if err != nil {
				t.Fatal(err)
			}
			if got := engineTarget(base, tt.port).String(); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
			if base.String() != tt.base {
				t.Errorf("base modified: %s", base)
			}
		})
	}
}
