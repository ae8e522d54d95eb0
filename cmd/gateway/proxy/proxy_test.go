package proxy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pdgate/pdgate/cmd/internal/validatetest"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

func testOptions() Options {
	o := DefaultOptions()
	o.ChunkSize = 7 // many frames for small bodies
	o.MessageTimeout = 2 * time.Second
	o.RequestTimeout = 20 * time.Second
	return o
}

// closedAddr returns a loopback address nobody listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

type upstreamSeen struct {
	headers http.Header
	body    string
	path    string
	host    string
}

// answer fails t on a transport error, else reads and closes resp's body.
func answer(t *testing.T, resp *http.Response, err error) []byte {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return body
}

// wantAnswer is answer that also fails t unless the status is wantStatus and the body holds
// wantBody.
func wantAnswer(t *testing.T, resp *http.Response, err error, wantStatus int, wantBody string) []byte {
	t.Helper()
	body := answer(t, resp, err)
	if resp.StatusCode != wantStatus || !strings.Contains(string(body), wantBody) {
		t.Fatalf("got %d %q, want %d containing %q", resp.StatusCode, body, wantStatus, wantBody)
	}
	return body
}

func startUpstream(t *testing.T, reply string, got chan<- upstreamSeen) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if got != nil {
			got <- upstreamSeen{headers: r.Header.Clone(), body: string(b), path: r.URL.RequestURI(), host: r.Host}
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, reply)
	}))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://")
}

func TestGatewayRoutesThroughEPP(t *testing.T) {
	got := make(chan upstreamSeen, 1)
	up := startUpstream(t, `{"model":"target","id":"x"}`, got)
	f := &fakeEPP{
		decide: func(h map[string]string, body []byte) decision {
			return decision{
				dest:   closedAddr(t) + "," + up, // the first one refuses: fall through
				set:    map[string]string{"x-prefiller-host-port": "127.0.0.9:8000", "x-client": "rewritten"},
				remove: []string{"x-drop-me"},
				body:   bytes.ReplaceAll(body, []byte(`"incoming"`), []byte(`"target"`)),
			}
		},
		rewrite: func(b []byte) []byte { return bytes.ReplaceAll(b, []byte(`"target"`), []byte(`"incoming"`)) },
	}
	gw := httptest.NewServer(New(testOptions(), startFakeEPP(t, f), nil))
	defer gw.Close()

	req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/completions?x=1", strings.NewReader(`{"model":"incoming","prompt":"hello world, long enough for frames"}`))
	req.Header.Set("X-Drop-Me", "1")
	req.Header.Set("X-Client", "original")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	body := answer(t, resp, err)
	if resp.StatusCode != 200 || string(body) != `{"model":"incoming","id":"x"}` {
		t.Fatalf("client got %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Went-Into-Resp-Headers") != "true" {
		t.Errorf("response header mutation not applied: %v", resp.Header)
	}
	u := <-got
	if u.body != `{"model":"target","prompt":"hello world, long enough for frames"}` {
		t.Errorf("upstream body %q: streamed body mutation not applied", u.body)
	}
	if u.headers.Get("X-Drop-Me") != "" || u.headers.Get("X-Client") != "rewritten" ||
		u.headers.Get("X-Prefiller-Host-Port") != "127.0.0.9:8000" {
		t.Errorf("upstream headers %v: set/remove not applied", u.headers)
	}
	if u.path != "/v1/completions?x=1" || !strings.HasPrefix(u.host, "127.0.0.1:") {
		t.Errorf("upstream path %q host %q", u.path, u.host)
	}

	f.seen.mu.Lock()
	defer f.seen.mu.Unlock()
	h := f.seen.reqHeaders
	if h[":method"] != "POST" || h[":path"] != "/v1/completions?x=1" || h[":scheme"] != "http" ||
		h[":authority"] == "" || h["x-request-id"] == "" || h["content-type"] != "application/json" {
		t.Errorf("EPP saw request headers %v", h)
	}
	if f.seen.reqHeaderEoS || f.seen.protoCfg.GetRequestBodyMode().String() != "FULL_DUPLEX_STREAMED" {
		t.Errorf("headers EoS=%v protocol config %v", f.seen.reqHeaderEoS, f.seen.protoCfg)
	}
	frames := f.seen.bodyFrames
	if len(frames) < 5 {
		t.Fatalf("want the body in several chunks, got %d frames", len(frames))
	}
	for i, fr := range frames {
		if fr.GetEndOfStream() != (i == len(frames)-1) {
			t.Errorf("frame %d EoS=%v", i, fr.GetEndOfStream())
		}
	}
	if f.seen.respHeaders[":status"] != "200" || f.seen.servedMeta != up {
		t.Errorf("EPP saw response headers %v served %q (want %s)", f.seen.respHeaders, f.seen.servedMeta, up)
	}
}

func TestGatewayStreamsSSEChunkByChunk(t *testing.T) {
	next := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 3; i++ {
			_, _ = io.WriteString(w, "data: {\"i\":"+string(rune('0'+i))+"}\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-next: // the client saw this event before we produce the next one
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer up.Close()
	f := &fakeEPP{
		decide:  func(map[string]string, []byte) decision { return decision{dest: strings.TrimPrefix(up.URL, "http://")} },
		rewrite: func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("data:"), []byte("data: seen")) },
	}
	gw := httptest.NewServer(New(testOptions(), startFakeEPP(t, f), nil))
	defer gw.Close()
	resp, err := http.Post(gw.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for i := 0; i < 3; i++ {
		line, err := rd.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "data: seen {\"i\":") {
			t.Fatalf("event %d: %q %v", i, line, err)
		}
		_, _ = rd.ReadString('\n')
		next <- struct{}{}
	}
	rest, _ := io.ReadAll(rd)
	if string(rest) != "data: seen [DONE]\n\n" {
		t.Fatalf("tail %q", rest)
	}
}

func TestGatewayFailureModes(t *testing.T) {
	fallback := make(chan upstreamSeen, 1)
	backend := startUpstream(t, `{"from":"default-backend"}`, fallback)
	tests := []struct {
		name       string
		d          decision
		failOpen   bool
		wantStatus int
		wantBody   string
		wantHeader [2]string
	}{
		{name: "immediate 412", d: decision{immediate: immediate(412, `{"error":"busy"}`, map[string]string{"x-error-pd-decode": "gate"})},
			wantStatus: 412, wantBody: `{"error":"busy"}`, wantHeader: [2]string{"X-Error-Pd-Decode", "gate"}},
		{name: "epp stream error fails closed", d: decision{err: status.Error(codes.Unknown, "boom")},
			wantStatus: 503, wantBody: "endpoint picker"},
		{name: "epp silent hits the message timeout", d: decision{silent: true},
			wantStatus: 503, wantBody: "message timeout"},
		{name: "epp stream error fails open", d: decision{err: status.Error(codes.Unknown, "boom")}, failOpen: true,
			wantStatus: 200, wantBody: `{"from":"default-backend"}`},
		{name: "no destination", d: decision{}, wantStatus: 503, wantBody: "no valid destination"},
		{name: "every endpoint refuses", d: decision{dest: closedAddr(t) + "," + closedAddr(t)},
			wantStatus: 503, wantBody: "no listed endpoint accepted a connection (2 tried)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeEPP{decide: func(map[string]string, []byte) decision { return tt.d }}
			o := testOptions()
			o.MessageTimeout = 200 * time.Millisecond
			if tt.failOpen {
				o.FailureMode, o.DefaultBackend = FailOpen, backend
			}
			gw := httptest.NewServer(New(o, startFakeEPP(t, f), nil))
			defer gw.Close()
			resp, err := http.Post(gw.URL+"/v1/completions", "application/json", strings.NewReader(`{"model":"m","prompt":"p"}`))
			body := wantAnswer(t, resp, err, tt.wantStatus, tt.wantBody)
			if tt.wantHeader[0] != "" && resp.Header.Get(tt.wantHeader[0]) != tt.wantHeader[1] {
				t.Errorf("header %s = %q", tt.wantHeader[0], resp.Header.Get(tt.wantHeader[0]))
			}
			if tt.wantStatus >= 500 { // the gateway's own answer: an OpenAI JSON error
				var e protocol.OpenAIError
				if err := json.Unmarshal(body, &e); err != nil || e.Error.Code != tt.wantStatus || e.Error.Type == "" || !bytes.Contains(body, []byte(`"param":null`)) ||
					resp.Header.Get("Content-Type") != "application/json" || resp.Header.Get("Content-Length") != strconv.Itoa(len(body)) {
					t.Errorf("not an OpenAI JSON error (%v): %s", resp.Header, body)
				}
			}
			if tt.failOpen {
				if u := <-fallback; u.body != `{"model":"m","prompt":"p"}` {
					t.Errorf("default backend got body %q, want the original", u.body)
				}
			}
		})
	}
}

// An EPP that rejects a body mid-stream answers and closes the stream while the gateway is
// still sending frames; the client must get the EPP's answer, not "stream closed".
func TestGatewayHonoursImmediateResponseSentMidBody(t *testing.T) {
	f := &fakeEPP{
		decide:          func(map[string]string, []byte) decision { return decision{} },
		rejectOver:      immediate(413, `{"error":{"message":"request body too large"}}`, nil),
		rejectOverBytes: 1024,
	}
	o := testOptions()
	o.ChunkSize = 256
	gw := httptest.NewServer(New(o, startFakeEPP(t, f), nil))
	defer gw.Close()
	for i := 0; i < 20; i++ {
		big := `{"model":"m","prompt":"` + strings.Repeat("a", 512<<10) + `"}`
		resp, err := http.Post(gw.URL+"/v1/completions", "application/json", strings.NewReader(big))
		body := answer(t, resp, err)
		if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "too large") {
			t.Fatalf("attempt %d: got %d %q, want the EPP's 413", i, resp.StatusCode, body)
		}
	}
}

func TestGatewayMetadataWinsOverHeaderAndHeaderOnly(t *testing.T) {
	got := make(chan upstreamSeen, 1)
	good := startUpstream(t, "ok", got)
	f := &fakeEPP{decide: func(map[string]string, []byte) decision {
		return decision{dest: closedAddr(t), metaDest: good}
	}}
	gw := httptest.NewServer(New(testOptions(), startFakeEPP(t, f), nil))
	defer gw.Close()
	resp, err := http.Get(gw.URL + "/v1/models")
	body := answer(t, resp, err)
	if resp.StatusCode != 200 || string(body) != "ok" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	<-got
	f.seen.mu.Lock()
	defer f.seen.mu.Unlock()
	if !f.seen.reqHeaderEoS || len(f.seen.bodyFrames) != 0 {
		t.Errorf("a GET must be a header-only exchange: EoS=%v frames=%d", f.seen.reqHeaderEoS, len(f.seen.bodyFrames))
	}
}

func TestOptionsValidate(t *testing.T) {
	validatetest.Options(t, DefaultOptions(), []validatetest.Case[Options]{
		{Name: "defaults", Change: func(*Options) {}},
		{Name: "bad epp", Change: func(o *Options) { o.EPPAddr = "nope" }, Want: "--epp"},
		{Name: "open without backend", Change: func(o *Options) { o.FailureMode = FailOpen }, Want: "--default-backend"},
		{Name: "unknown mode", Change: func(o *Options) { o.FailureMode = "maybe" }, Want: "--failure-mode"},
		{Name: "zero timeout", Change: func(o *Options) { o.MessageTimeout = 0 }, Want: "--epp-message-timeout"},
		{Name: "ca without tls", Change: func(o *Options) { o.EPPTLS = false; o.EPPCAFile = "x" }, Want: "--epp-ca-file"},
	})
}

// A client that leaves mid-stream is recorded as 499 (client went away), not as an
// upstream failure, and the upstream request is cancelled.
func TestGatewayClientGoneMidStream(t *testing.T) {
	upstreamDone := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(upstreamDone)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done() // stream "forever" until the gateway cancels us
	}))
	defer up.Close()
	f := &fakeEPP{decide: func(map[string]string, []byte) decision { return decision{dest: strings.TrimPrefix(up.URL, "http://")} }}
	m := newGatewayMetrics(nil)
	gw := httptest.NewServer(New(testOptions(), startFakeEPP(t, f), m))
	defer gw.Close()
	resp, err := http.Post(gw.URL+"/v1/completions", "application/json", strings.NewReader(`{"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	if line != "data: first\n" {
		t.Fatalf("first line %q", line)
	}
	resp.Body.Close()
	select {
	case <-upstreamDone:
	case <-time.After(20 * time.Second):
		t.Fatal("the upstream request was not cancelled after the client left")
	}
	for i := 0; count(m, "499") != 1; i++ {
		if i > 2000 {
			t.Fatalf("499 count %v, 502 count %v", count(m, "499"), count(m, "502"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func count(m *gatewayMetrics, code string) float64 {
	var pb dto.Metric
	_ = m.requests.WithLabelValues(code).Write(&pb)
	return pb.GetCounter().GetValue()
}
