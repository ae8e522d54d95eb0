package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pdgate/pdgate/cmd/sidecar/allowlist"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// recorded is one request a fake engine received.
type recorded struct {
	Method, Path string
	Header       http.Header
	Body         map[string]any
	Raw          string
}

// fake is an in-process engine whose answers each test scripts.
type fake struct {
	t       testing.TB
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []recorded
	handler func(w http.ResponseWriter, r *http.Request, body map[string]any)
}

func newFake(t testing.TB, h func(w http.ResponseWriter, r *http.Request, body map[string]any)) *fake {
	t.Helper()
	f := &fake{t: t, handler: h}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		_ = json.Unmarshal(raw, &body)
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{Method: r.Method, Path: r.URL.Path, Header: r.Header.Clone(), Body: body, Raw: string(raw)})
		f.mu.Unlock()
		if f.handler != nil {
			f.handler(w, r, body)
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) hp() protocol.HostPort {
	u, _ := url.Parse(f.srv.URL)
	port, _ := strconv.Atoi(u.Port())
	return protocol.HostPort{Host: u.Hostname(), Port: port}
}

func (f *fake) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// requestsTo returns the requests on one path.
func (f *fake) requestsTo(path string) []recorded {
	var out []recorded
	for _, r := range f.requests() {
		if r.Path == path {
			out = append(out, r)
		}
	}
	return out
}

func (f *fake) only(t *testing.T) recorded {
	t.Helper()
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("engine %s got %d requests, want 1", f.srv.URL, len(reqs))
	}
	return reqs[0]
}

// jsonAnswer writes a JSON body.
func jsonAnswer(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// sseAnswer streams the given data events with a flush after each.
func sseAnswer(w http.ResponseWriter, events ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	for _, e := range events {
		_, _ = io.WriteString(w, "data: "+e+"\n\n")
		w.(http.Flusher).Flush()
	}
}

// decodeOK answers like a vLLM decode after a whole handoff (its stream reports every prompt
// token cached): SSE when stream is set, else JSON with usage.
func decodeOK(w http.ResponseWriter, _ *http.Request, body map[string]any) {
	if s, _ := body["stream"].(bool); s {
		sseAnswer(w, `{"choices":[{"delta":{"content":"Hel"}}]}`, `{"choices":[{"delta":{"content":"lo"}}]}`,
			`{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":10}}}`, "[DONE]")
		return
	}
	jsonAnswer(w, 200, map[string]any{"choices": []any{map[string]any{"text": "Hello", "finish_reason": "stop"}},
		"usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 2}})
}

// prefillOK answers like a vLLM NIXL prefiller.
func prefillOK(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
	jsonAnswer(w, 200, map[string]any{
		"choices":            []any{map[string]any{"text": "x", "finish_reason": "length"}},
		"kv_transfer_params": map[string]any{"do_remote_prefill": true, "do_remote_decode": false, "remote_engine_id": "eng-1", "remote_block_ids": []any{1, 2}, "remote_host": "10.9.9.9", "remote_port": 5600, "tp_size": 1},
		"usage":              map[string]any{"prompt_tokens": 10, "prompt_tokens_details": map[string]any{"cached_tokens": 6}},
	})
}

type testEnv struct {
	proxy   *Proxy
	srv     *httptest.Server
	metrics *Metrics
	reg     *prometheus.Registry
}

func testConfig(decode *fake, allowed ...protocol.HostPort) Config {
	u, _ := url.Parse(decode.srv.URL)
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client := func() *http.Client {
		return &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), CheckRedirect: noRedirect}
	}
	return Config{
		Engine: EngineVLLM, EngineURL: u, KVConnector: ConnectorNIXLv2, TRTSchedule: ContextFirst,
		SGLangBootstrapPort: 8998, PrefillTimeout: 5 * time.Second, FailurePolicy: FailFast,
		PrefillMaxRetries: 2, PrefillRetryBackoff: time.Millisecond, EncodeTimeout: 5 * time.Second,
		AbortTimeout: time.Second, AbortRetryDelay: 10 * time.Millisecond,
		FirstResponseTimeout: 10 * time.Second, StreamIdleTimeout: 10 * time.Second,
		MaxRequestBytes: 1 << 20,
		PrefillClient:   client(), DecodeClient: client(), EncodeClient: client(),
		Allow: allowlist.NewStatic(allowed), Log: logr.Discard(),
	}
}

func startProxy(t testing.TB, cfg Config) *testEnv {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Metrics = NewMetrics(reg)
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return &testEnv{proxy: p, srv: srv, metrics: cfg.Metrics, reg: reg}
}

// post sends a request through the sidecar and returns the response with its body read.
func (e *testEnv) post(t *testing.T, path, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// checkPrefillAnswer checks what the sidecar told the client about a P/D request's prefill: the
// status (fatal when off, the rest would not mean much), the prefill outcome header and whether
// the answer blames the prefill leg (x-error-pd-prefill).
func checkPrefillAnswer(t *testing.T, resp *http.Response, body string, status int, outcome string, errPrefill bool) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d: %s", resp.StatusCode, status, body)
	}
	if got := resp.Header.Get(protocol.HeaderPrefillOutcome); got != outcome {
		t.Errorf("outcome %q, want %q", got, outcome)
	}
	if got := resp.Header.Get(protocol.HeaderErrorPrefill) == "true"; got != errPrefill {
		t.Errorf("x-error-pd-prefill %v, want %v", got, errPrefill)
	}
}

// counter reads a counter or gauge value.
func counter(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	m := <-ch
	var out dto.Metric
	_ = m.Write(&out)
	if out.Counter != nil {
		return out.Counter.GetValue()
	}
	return out.Gauge.GetValue()
}
