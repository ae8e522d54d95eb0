package extproc

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	errcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/error"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"

	"github.com/go-logr/logr/funcr"

	"github.com/pdgate/pdgate/plugins/decisiontrace"
	"github.com/pdgate/pdgate/plugins/protocol"
)

// fakeDirector stands in for GIE's director; GIE's real StreamingServer runs around it.
type fakeDirector struct {
	mu       sync.Mutex
	seen     map[string]string
	plugin   func(h map[string]string) error
	released int // end-of-stream ResponseBody calls (where PreRequest charges are released)
}

func (d *fakeDirector) HandleRequest(_ context.Context, rc *handlers.RequestContext) (*handlers.RequestContext, error) {
	d.mu.Lock()
	d.seen = map[string]string{}
	for k, v := range rc.Request.Headers {
		d.seen[k] = v
	}
	d.mu.Unlock()
	rc.TargetEndpoint = "127.0.0.3:8000"
	rc.TargetPod = &fwkdl.EndpointMetadata{Address: "127.0.0.3", Port: "8000"}
	if d.plugin != nil {
		if err := d.plugin(rc.Request.Headers); err != nil {
			return rc, err
		}
	}
	return rc, nil
}
func (d *fakeDirector) HandleResponseHeader(_ context.Context, rc *handlers.RequestContext) *handlers.RequestContext {
	return rc
}
func (d *fakeDirector) HandleResponseBody(_ context.Context, rc *handlers.RequestContext, eos bool) *handlers.RequestContext {
	if eos {
		d.mu.Lock()
		d.released++
		d.mu.Unlock()
	}
	return rc
}
func (d *fakeDirector) GetRandomEndpoint() *fwkdl.EndpointMetadata {
	return &fwkdl.EndpointMetadata{Address: "127.0.0.3", Port: "8000"}
}

type fakeDS struct{}

func (fakeDS) PoolGet() (*datalayer.EndpointPool, error) {
	return datalayer.NewEndpointPool("ns", "p"), nil
}

type fakeTraces struct {
	mu sync.Mutex
	m  map[string]*decisiontrace.Trace
}

func (f *fakeTraces) Take(id string) *decisiontrace.Trace {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.m[id]
	delete(f.m, id)
	return t
}

func startServer(t *testing.T, d *fakeDirector, opts Options) extProcPb.ExternalProcessorClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	extProcPb.RegisterExternalProcessorServer(srv, New(handlers.NewStreamingServer(fakeDS{}, d, nil), opts))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return extProcPb.NewExternalProcessorClient(conn)
}

func headersFrame(kv ...string) *extProcPb.ProcessingRequest {
	hm := &configPb.HeaderMap{}
	for i := 0; i+1 < len(kv); i += 2 {
		hm.Headers = append(hm.Headers, &configPb.HeaderValue{Key: kv[i], RawValue: []byte(kv[i+1])})
	}
	return &extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extProcPb.HttpHeaders{Headers: hm}}}
}

func bodyFrame(b string, eos bool) *extProcPb.ProcessingRequest {
	return &extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestBody{
		RequestBody: &extProcPb.HttpBody{Body: []byte(b), EndOfStream: eos}}}
}

func setHeaders(r *extProcPb.ProcessingResponse) map[string]string {
	out := map[string]string{}
	var opts []*configPb.HeaderValueOption
	switch v := r.Response.(type) {
	case *extProcPb.ProcessingResponse_RequestHeaders:
		opts = v.RequestHeaders.GetResponse().GetHeaderMutation().GetSetHeaders()
	case *extProcPb.ProcessingResponse_ResponseHeaders:
		opts = v.ResponseHeaders.GetResponse().GetHeaderMutation().GetSetHeaders()
	case *extProcPb.ProcessingResponse_ImmediateResponse:
		opts = v.ImmediateResponse.GetHeaders().GetSetHeaders()
	}
	for _, o := range opts {
		out[strings.ToLower(o.GetHeader().GetKey())] = headerValue(o.GetHeader())
	}
	return out
}

const body = `{"model":"m","prompt":"hi"}`

func TestRoutingHeadersAndImmediateAnswers(t *testing.T) {
	spoof := []string{
		"x-request-id", "req-1",
		protocol.HeaderPrefillerHostPort, "10.9.9.9:1",
		"X-Encoder-Hosts-Ports", "10.9.9.9:2",
		protocol.HeaderImmediateStatus, "200",
		"x-keep", "yes",
	}
	tests := []struct {
		name       string
		plugin     func(h map[string]string) error
		max        int64
		headers    []string
		bodies     []string
		wantStatus int // 0: forwarded
		wantSet    map[string]string
		wantBody   string
		// wantRelease: GIE's end-of-request hook must still run for a scheduled request
		// answered by the wrapper.
		wantRelease bool
	}{
		{name: "spoofed headers dropped and removed", headers: spoof,
			wantSet: map[string]string{"x-keep": "yes", "x-gateway-destination-endpoint": "127.0.0.3:8000"}},
		{name: "plugin-set routing header forwarded", headers: spoof,
			plugin: func(h map[string]string) error {
				h[protocol.HeaderPrefillerHostPort] = "127.0.0.2:8000"
				h[protocol.HeaderEncoderHostsPorts] = "" // explicit clear
				return nil
			},
			wantSet: map[string]string{protocol.HeaderPrefillerHostPort: "127.0.0.2:8000"}},
		{name: "plugin asks for 412", headers: spoof,
			plugin: func(h map[string]string) error {
				h[protocol.HeaderImmediateStatus] = "412"
				h[protocol.HeaderImmediateBody] = `{"error":"busy"}`
				h[protocol.HeaderImmediateHeaders] = "retry-after=1, x-why=a=b"
				return nil
			},
			wantStatus: 412, wantBody: `{"error":"busy"}`, wantRelease: true,
			wantSet: map[string]string{"retry-after": "1", "x-why": "a=b", "content-type": "application/json"}},
		{name: "invalid immediate status becomes 500", headers: spoof,
			plugin:     func(h map[string]string) error { h[protocol.HeaderImmediateStatus] = "abc"; return nil },
			wantStatus: 500},
		{name: "status marker rewrites GIE 429", headers: spoof,
			plugin: func(map[string]string) error {
				return errcommon.Error{Code: errcommon.ResourceExhausted,
					Msg: "failed to find target endpoint: " + protocol.StatusError(503, "no bucket fits").Error()}
			},
			wantStatus: 503, wantBody: "inference error: ResourceExhausted - failed to find target endpoint: no bucket fits"},
		{name: "412 marker answers with llm-d's conditional-decode body", headers: spoof,
			plugin: func(map[string]string) error {
				return errcommon.Error{Code: errcommon.ResourceExhausted,
					Msg: "failed to find target endpoint: " + protocol.StatusError(412, protocol.ConditionalDecodeMessage).Error()}
			},
			wantStatus: 412, wantBody: protocol.ConditionalDecodeBody},
		{name: "GIE 429 without marker untouched", headers: spoof,
			plugin:     func(map[string]string) error { return errcommon.Error{Code: errcommon.ResourceExhausted, Msg: "full"} },
			wantStatus: 429},
		{name: "body over limit", headers: spoof, max: 10, bodies: []string{"0123456", "789abc"}, wantStatus: 413},
		{name: "content-length over limit", headers: append([]string{"content-length", "99"}, spoof...), max: 10, wantStatus: 413},
		{name: "body at limit passes", headers: spoof, max: int64(len(body)),
			wantSet: map[string]string{"x-keep": "yes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &fakeDirector{plugin: tt.plugin}
			client := startServer(t, d, Options{MaxRequestBodyBytes: tt.max})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := client.Process(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Send(headersFrame(tt.headers...)); err != nil {
				t.Fatal(err)
			}
			bodies := tt.bodies
			if bodies == nil {
				bodies = []string{body}
			}
			for i, b := range bodies {
				// The server may already have answered (413): a failed send is fine then.
				_ = st.Send(bodyFrame(b, i == len(bodies)-1))
			}
			resp, err := st.Recv()
			if err != nil {
				t.Fatalf("recv: %v", err)
			}
			set := setHeaders(resp)
			if tt.wantStatus != 0 {
				ir := resp.GetImmediateResponse()
				if ir == nil {
					t.Fatalf("want immediate %d, got %v", tt.wantStatus, resp)
				}
				if int(ir.GetStatus().GetCode()) != tt.wantStatus {
					t.Fatalf("status %d, want %d (body %q)", ir.GetStatus().GetCode(), tt.wantStatus, ir.Body)
				}
				if tt.wantBody != "" && string(ir.Body) != tt.wantBody {
					t.Fatalf("body %q, want %q", ir.Body, tt.wantBody)
				}
				// Nothing follows an immediate answer.
				if r, err := st.Recv(); !errors.Is(err, io.EOF) {
					t.Fatalf("after immediate: %v %v", r, err)
				}
			} else {
				hr := resp.GetRequestHeaders()
				if hr == nil {
					t.Fatalf("want header response, got %v", resp)
				}
				removed := hr.GetResponse().GetHeaderMutation().GetRemoveHeaders()
				for _, name := range protocol.RoutingHeaders {
					_, isSet := set[name]
					if isSet == contains(removed, name) {
						t.Errorf("%s: set=%v removed=%v; exactly one expected", name, isSet, removed)
					}
				}
				if b, err := st.Recv(); err != nil || b.GetRequestBody() == nil {
					t.Fatalf("want body frame, got %v %v", b, err)
				}
			}
			for k, v := range tt.wantSet {
				if set[k] != v {
					t.Errorf("header %s = %q, want %q (all %v)", k, set[k], v, set)
				}
			}
			for k := range set {
				if strings.HasPrefix(k, protocol.InternalHeaderPrefix) {
					t.Errorf("internal header %s forwarded", k)
				}
				if v := set[k]; strings.HasPrefix(v, "10.9.9.9") {
					t.Errorf("spoofed value forwarded in %s", k)
				}
			}
			// The handler returned before the client saw EOF, so GIE's deferred hook has run.
			d.mu.Lock()
			defer d.mu.Unlock()
			if tt.wantRelease && d.released != 1 {
				t.Fatalf("end-of-request hook ran %d times, want 1", d.released)
			}
			for k := range d.seen {
				lk := strings.ToLower(k)
				if isRoutingHeader(lk) || strings.HasPrefix(lk, protocol.InternalHeaderPrefix) {
					t.Errorf("director saw client header %s", k)
				}
			}
		})
	}
}

func TestDecisionTraceHeader(t *testing.T) {
	tests := []struct {
		name  string
		allow bool
		ask   string
		want  bool
	}{
		{"asked and allowed", true, "1", true},
		{"asked as true", true, "true", true},
		{"asked, not allowed", false, "1", false},
		{"allowed, not asked", true, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &decisiontrace.Trace{}
			tr.Stage("prefill", false, "short prompt")
			traces := &fakeTraces{m: map[string]*decisiontrace.Trace{"req-7": tr}}
			client := startServer(t, &fakeDirector{}, Options{AllowTrace: tt.allow, Traces: traces})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			st, err := client.Process(ctx)
			if err != nil {
				t.Fatal(err)
			}
			_ = st.Send(headersFrame("x-request-id", "req-7", protocol.HeaderTrace, tt.ask))
			_ = st.Send(bodyFrame(body, true))
			for i := 0; i < 2; i++ {
				if _, err := st.Recv(); err != nil {
					t.Fatal(err)
				}
			}
			_ = st.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_ResponseHeaders{
				ResponseHeaders: &extProcPb.HttpHeaders{Headers: &configPb.HeaderMap{Headers: []*configPb.HeaderValue{
					{Key: ":status", RawValue: []byte("200")},
					{Key: protocol.HeaderImmediateStatus, RawValue: []byte("500")},
				}}}}})
			resp, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			set := setHeaders(resp)
			got, ok := set[protocol.HeaderDecision]
			if ok != tt.want || (ok && got != "prefill-skipped=short prompt") {
				t.Fatalf("decision header = %q (present %v), want present %v", got, ok, tt.want)
			}
			if _, ok := set[protocol.HeaderImmediateStatus]; ok {
				t.Fatal("internal header forwarded on the response")
			}
			if len(traces.m) != 0 {
				t.Fatal("trace not taken")
			}
		})
	}
}

func TestParseHeaderList(t *testing.T) {
	got := parseHeaderList(" Retry-After=3 ,bad, =x, x-pdgate-internal-a=1, a b=2, x-v=a=b,")
	var parts []string
	for _, o := range got {
		parts = append(parts, o.Header.Key+"="+string(o.Header.RawValue))
	}
	if s := strings.Join(parts, ";"); s != "retry-after=3;x-v=a=b" {
		t.Fatalf("got %q", s)
	}
}

func FuzzParseHeaderList(f *testing.F) {
	f.Add("retry-after=1,x=y")
	f.Add("=,,==,a=")
	f.Fuzz(func(t *testing.T, s string) {
		for _, o := range parseHeaderList(s) {
			k := o.Header.Key
			if k == "" || strings.HasPrefix(k, protocol.InternalHeaderPrefix) || strings.ContainsAny(k, " \t:,=") {
				t.Fatalf("bad header name %q from %q", k, s)
			}
		}
	})
}

// The logged trace carries the request id, which is how `pdgate lab traces` and a person
// reading the EPP's log tie it to the request.
func TestLoggedTraceNamesTheRequest(t *testing.T) {
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 2})
	traces := &fakeTraces{m: map[string]*decisiontrace.Trace{"req-7": {Notes: []string{"picked"}}}}
	st := &stream{s: New(nil, Options{Traces: traces}), logger: logger, requestID: "req-7"}
	st.takeTrace()
	if len(lines) != 1 || !strings.Contains(lines[0], `"x-request-id"="req-7"`) || !strings.Contains(lines[0], "Decision trace") {
		t.Fatalf("logged %q, want one trace line naming x-request-id req-7", lines)
	}
}
