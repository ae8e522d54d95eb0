package extproc

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"

	"github.com/pdgate/pdgate/cmd/internal/extproctest"
	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/parser/openaiparser"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

var decodeEP = fwksched.NewEndpoint(&fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "d"},
	Address: "127.0.0.3", Port: "8000"}, fwkdl.NewMetrics(), nil)

type fakeDS struct{}

func (fakeDS) PoolGet() (*datalayer.EndpointPool, error) {
	return datalayer.NewEndpointPool("ns", "p"), nil
}
func (fakeDS) ObjectiveGet(string) *v1alpha2.InferenceObjective { return nil }
func (fakeDS) PodList(func(fwkdl.Endpoint) bool) []fwkdl.Endpoint {
	return nil
}
func (fakeDS) ModelRewriteGet(string) (*v1alpha2.InferenceModelRewriteRule, string) { return nil, "" }

type fakeCandidates struct{}

func (fakeCandidates) Locate(context.Context, map[string]any) []fwkdl.Endpoint {
	return []fwkdl.Endpoint{fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "d"},
		Address: "127.0.0.3", Port: "8000"}, fwkdl.NewMetrics())}
}

type admitAll struct{}

func (admitAll) Admit(context.Context, *handlers.RequestContext, int) error { return nil }

// fakeScheduler picks decodeEP, or answers through the request's context as a filter would.
type fakeScheduler struct {
	record *contract.Answer
	err    error
	seen   map[string]string // the headers the scheduling plugins saw
}

func (s *fakeScheduler) Schedule(ctx context.Context, req *fwksched.LLMRequest, _ []fwksched.Endpoint) (*fwksched.SchedulingResult, error) {
	s.seen = map[string]string{}
	for k, v := range req.Headers {
		s.seen[k] = v
	}
	if s.record != nil {
		contract.Record(ctx, s.record)
		return nil, errors.New("filtered everything")
	}
	if s.err != nil {
		return nil, s.err
	}
	return &fwksched.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*fwksched.ProfileRunResult{
		"decode": {TargetEndpoints: []fwksched.Endpoint{decodeEP}}}}, nil
}

// hooksPlugin is every request-control hook at once, counting calls.
type hooksPlugin struct {
	mu                              sync.Mutex
	setHeader                       map[string]string // written in PreRequest
	deny                            error             // AdmitRequest's answer
	preRequests, eos, respHeaderRun int
	addResponseHeader               string
}

func (p *hooksPlugin) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "hooks", Name: "h"}
}
func (p *hooksPlugin) AdmitRequest(context.Context, *fwksched.LLMRequest, []fwksched.Endpoint) error {
	return p.deny
}
func (p *hooksPlugin) PreRequest(_ context.Context, r *fwksched.LLMRequest, _ *fwksched.SchedulingResult) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.preRequests++
	for k, v := range p.setHeader {
		r.Headers[k] = v
	}
}
func (p *hooksPlugin) ResponseHeader(_ context.Context, _ *fwksched.LLMRequest, resp *fwkrc.Response, _ *fwkdl.EndpointMetadata) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.respHeaderRun++
	if p.addResponseHeader != "" {
		resp.Headers[p.addResponseHeader] = "yes"
	}
}
func (p *hooksPlugin) ResponseBody(_ context.Context, _ *fwksched.LLMRequest, resp *fwkrc.Response, _ *fwkdl.EndpointMetadata) {
	if resp.EndOfStream {
		p.mu.Lock()
		p.eos++
		p.mu.Unlock()
	}
}
func (p *hooksPlugin) counts() (int, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.preRequests, p.eos
}

// fakeGate is the conditional-decode gate.
type fakeGate struct {
	reject bool
	calls  int
}

func (g *fakeGate) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "gate", Name: "g"}
}
func (g *fakeGate) IsConditionalDecodeGate() bool { return true }
func (g *fakeGate) CheckConditionalDecode(context.Context, *fwksched.LLMRequest, fwksched.Endpoint) bool {
	g.calls++
	return g.reject
}

type fixture struct {
	sched  *fakeScheduler
	hooks  *hooksPlugin
	gate   *fakeGate
	opts   Options
	client extProcPb.ExternalProcessorClient
}

func start(t testing.TB, f *fixture) *fixture {
	t.Helper()
	if f.sched == nil {
		f.sched = &fakeScheduler{}
	}
	if f.hooks == nil {
		f.hooks = &hooksPlugin{}
	}
	plugins := []fwkplugin.Plugin{f.hooks}
	if f.gate != nil {
		plugins = append(plugins, f.gate)
	}
	srv := New(Config{Datastore: fakeDS{}, Scheduler: f.sched, Admission: admitAll{}, Candidates: fakeCandidates{},
		Parser: openaiparser.New("p", openaiparser.Params{Payload: openaiparser.ModeRaw}), Plugins: plugins}, f.opts)
	f.client = extProcPb.NewExternalProcessorClient(extproctest.Dial(t, srv))
	return f
}

// result is what the EPP answered for the request phase.
type result struct {
	immediate int
	body      string
	immHdr    map[string]string
	set       map[string]string
	removed   map[string]bool
	frames    []string // request body frames sent back
	stream    extProcPb.ExternalProcessor_ProcessClient
}

func (f *fixture) run(t testing.TB, headers map[string]string, frames ...string) *result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	stream, err := f.client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hv := []*configPb.HeaderValue{{Key: ":path", RawValue: []byte("/v1/completions")}}
	for k, v := range headers {
		hv = append(hv, &configPb.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	// The EPP may answer and end the stream before the client has sent every frame (an early
	// 413): Send then reports io.EOF and the answer waits in Recv, as with Envoy.
	send := func(m *extProcPb.ProcessingRequest) {
		if err := stream.Send(m); err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
	}
	send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extProcPb.HttpHeaders{Headers: &configPb.HeaderMap{Headers: hv}, EndOfStream: len(frames) == 0}}})
	for i, fr := range frames {
		send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestBody{
			RequestBody: &extProcPb.HttpBody{Body: []byte(fr), EndOfStream: i == len(frames)-1}}})
	}
	r := &result{set: map[string]string{}, removed: map[string]bool{}, immHdr: map[string]string{}, stream: stream}
	for {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatalf("recv: %v", err)
		}
		if ir := resp.GetImmediateResponse(); ir != nil {
			r.immediate, r.body = int(ir.GetStatus().GetCode()), string(ir.GetBody())
			for _, h := range ir.GetHeaders().GetSetHeaders() {
				r.immHdr[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
			}
			return r
		}
		if hr := resp.GetRequestHeaders(); hr != nil {
			for _, h := range hr.GetResponse().GetHeaderMutation().GetSetHeaders() {
				r.set[strings.ToLower(h.GetHeader().GetKey())] = string(h.GetHeader().GetRawValue())
			}
			for _, k := range hr.GetResponse().GetHeaderMutation().GetRemoveHeaders() {
				r.removed[k] = true
			}
			if len(frames) == 0 {
				return r
			}
		}
		if br := resp.GetRequestBody(); br != nil {
			sr := br.GetResponse().GetBodyMutation().GetStreamedResponse()
			r.frames = append(r.frames, string(sr.GetBody()))
			if sr.GetEndOfStream() {
				return r
			}
		}
	}
}

const completion = `{"model":"m","prompt":"hello world","max_tokens":3}`

// bigCompletion is a 130 KB completion request, in 16 KiB frames as Envoy streams it.
var bigCompletion = `{"model":"m","prompt":"` + strings.Repeat("long prompt ", 130000/12) + `","max_tokens":3}`

func framesOf(s string, size int) []string {
	var out []string
	for len(s) > size {
		out = append(out, s[:size])
		s = s[size:]
	}
	return append(out, s)
}

func TestRequestPath(t *testing.T) {
	spoof := map[string]string{protocol.HeaderPrefillerHostPort: "10.6.6.6:80", "X-Encoder-Hosts-Ports": "evil:1"}
	tests := []struct {
		name      string
		f         fixture
		headers   map[string]string
		frames    []string
		immediate int
		body      string   // immediate body (substring)
		immHdr    string   // an immediate-response header that must be set
		cause     string   // x-pdgate-error-cause of the immediate answer, when checked
		frameOut  []string // body frames sent upstream, when routed
		check     func(t *testing.T, f *fixture, r *result)
	}{
		{name: "unchanged body goes back in GIE's 62,000-byte chunks whatever its frames, routing headers removed",
			headers: spoof, frames: []string{completion[:10], completion[10:30], completion[30:]},
			frameOut: []string{completion},
			check: func(t *testing.T, f *fixture, r *result) {
				if r.set["x-gateway-destination-endpoint"] != "127.0.0.3:8000" || r.set["content-length"] != strconv.Itoa(len(completion)) {
					t.Fatalf("set %v", r.set)
				}
				for _, h := range protocol.RoutingHeaders {
					if !r.removed[h] {
						t.Fatalf("%s not removed: %v", h, r.removed)
					}
					if _, ok := f.sched.seen[h]; ok {
						t.Fatalf("plugins saw the client's %s", h)
					}
				}
				if r.set["x-request-id"] == "" {
					t.Fatal("a generated request id must go upstream")
				}
				if _, echoed := r.set[":path"]; echoed {
					t.Fatal("unchanged headers are not echoed")
				}
			}},
		{name: "a large body arrives in 16 KiB frames and goes back in 62,000-byte chunks",
			frames: framesOf(bigCompletion, 16<<10), frameOut: framesOf(bigCompletion, 62000)},
		{name: "a plugin's routing header is set, not removed",
			f:      fixture{hooks: &hooksPlugin{setHeader: map[string]string{protocol.HeaderPrefillerHostPort: "127.0.0.2:8000"}}},
			frames: []string{completion}, frameOut: []string{completion},
			check: func(t *testing.T, f *fixture, r *result) {
				if r.set[protocol.HeaderPrefillerHostPort] != "127.0.0.2:8000" || r.removed[protocol.HeaderPrefillerHostPort] || !r.removed[protocol.HeaderEncoderHostsPorts] {
					t.Fatalf("set %v removed %v", r.set, r.removed)
				}
			}},
		{name: "model rewrite changes only the model value",
			headers: map[string]string{"x-gateway-model-name-rewrite": "big-model"}, frames: []string{completion[:20], completion[20:]},
			frameOut: []string{`{"model":"big-model","prompt":"hello world","max_tokens":3}`}},
		{name: "413 from content-length", f: fixture{opts: Options{MaxRequestBodyBytes: 10}},
			headers: map[string]string{"content-length": "50"}, frames: []string{completion}, immediate: 413, body: "exceeds the EPP limit of 10"},
		{name: "413 from the body", f: fixture{opts: Options{MaxRequestBodyBytes: 10}},
			frames: []string{completion[:8], completion[8:]}, immediate: 413, body: "exceeds the EPP limit of 10", cause: "body_too_large"},
		{name: "conditional-decode miss answers llm-d's 412 before PreRequest, and releases",
			f: fixture{gate: &fakeGate{reject: true}}, headers: map[string]string{"Prefer": "return=minimal, If-Available"},
			frames: []string{completion}, immediate: 412, body: protocol.ConditionalDecodeBody,
			check: func(t *testing.T, f *fixture, r *result) {
				_, _ = r.stream.Recv() // the EPP ended the stream
				if pre, eos := f.hooks.counts(); pre != 0 || eos != 1 || f.gate.calls != 1 {
					t.Fatalf("preRequests=%d eos=%d gate=%d", pre, eos, f.gate.calls)
				}
			}},
		{name: "gate not asked without Prefer: if-available", f: fixture{gate: &fakeGate{reject: true}},
			headers: map[string]string{"prefer": "return=minimal"}, frames: []string{completion}, frameOut: []string{completion},
			check: func(t *testing.T, f *fixture, r *result) {
				if f.gate.calls != 0 {
					t.Fatal("gate asked")
				}
			}},
		{name: "a filter's recorded answer wins over the scheduler's error",
			f:      fixture{sched: &fakeScheduler{record: contract.NewAnswer(503, contract.CauseNoBucket, "routing_error", "no bucket").WithHeader("x-error-routing", "true")}},
			frames: []string{completion}, immediate: 503, body: "no bucket", immHdr: "x-error-routing", cause: "no_bucket"},
		{name: "an admission plugin's answer keeps its status and headers",
			f:      fixture{hooks: &hooksPlugin{deny: contract.NewAnswer(429, contract.CauseRateLimited, "rate_limit_exceeded", "capped").WithHeader("retry-after", "1")}},
			frames: []string{completion}, immediate: 429, body: "capped", immHdr: "retry-after"},
		{name: "a plain admission denial is GIE's 500", f: fixture{hooks: &hooksPlugin{deny: errors.New("no")}},
			frames: []string{completion}, immediate: 500, body: `{"error":{"message":"request cannot be admitted","type":"server_error","param":null,"code":500}}`},
		{name: "a plain scheduling error is GIE's 429", f: fixture{sched: &fakeScheduler{err: errors.New("nothing fits")}},
			frames: []string{completion}, immediate: 429, body: `{"error":{"message":"failed to find target endpoint: nothing fits","type":"rate_limit_error","param":null,"code":429}}`},
		{name: "a malformed body is a 400", frames: []string{`{"model":`}, immediate: 400, body: `{"error":{"message":"error unmarshaling request body`, cause: "gie_BadRequest"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := start(t, &tt.f)
			r := f.run(t, tt.headers, tt.frames...)
			if r.immediate != tt.immediate || !strings.Contains(r.body, tt.body) {
				t.Fatalf("immediate %d %q, want %d %q", r.immediate, r.body, tt.immediate, tt.body)
			}
			if tt.immediate != 0 {
				// Every answer the EPP makes itself is an OpenAI JSON error (vLLM's shape).
				var e protocol.OpenAIError
				if err := json.Unmarshal([]byte(r.body), &e); err != nil || e.Error.Code != tt.immediate || e.Error.Message == "" || e.Error.Type == "" {
					t.Fatalf("immediate body %q is not an OpenAI error with code %d: %v", r.body, tt.immediate, err)
				}
				if ct := r.immHdr["content-type"]; ct != "application/json" {
					t.Fatalf("immediate content-type %q (headers %v)", ct, r.immHdr)
				}
				// ... and names its cause, as the immediate-responses metric labels it.
				if c := r.immHdr[protocol.HeaderErrorCause]; c == "" || (tt.cause != "" && c != tt.cause) {
					t.Fatalf("immediate %s %q, want %q (headers %v)", protocol.HeaderErrorCause, c, tt.cause, r.immHdr)
				}
			}
			if tt.immHdr != "" && r.immHdr[tt.immHdr] == "" {
				t.Fatalf("immediate headers %v lack %s", r.immHdr, tt.immHdr)
			}
			if tt.immediate == 0 && strings.Join(r.frames, "|") != strings.Join(tt.frameOut, "|") {
				t.Fatalf("frames %q, want %q", r.frames, tt.frameOut)
			}
			if tt.check != nil {
				tt.check(t, f, r)
			}
		})
	}
}

func TestHeaderOnlyRequestRemovesRoutingHeaders(t *testing.T) {
	f := start(t, &fixture{})
	r := f.run(t, map[string]string{protocol.HeaderPrefillerHostPort: "10.6.6.6:80"})
	// fakeDS has no pods: GIE answers 500, and so does pdgate.
	if r.immediate != 500 {
		t.Fatalf("immediate %d", r.immediate)
	}
}

// The response phase: only the plugins' header changes go back (never GIE's debugging header),
// a non-streaming body is echoed frame by frame, and the end-of-stream hooks run once.
func TestResponsePath(t *testing.T) {
	f := start(t, &fixture{hooks: &hooksPlugin{addResponseHeader: "x-added"}})
	r := f.run(t, nil, completion)
	send := func(m *extProcPb.ProcessingRequest) {
		if err := r.stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extProcPb.HttpHeaders{
		Headers: &configPb.HeaderMap{Headers: []*configPb.HeaderValue{{Key: ":status", RawValue: []byte("200")},
			{Key: "content-type", RawValue: []byte("application/json")}}}}}})
	resp, err := r.stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	for _, h := range resp.GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		set[h.GetHeader().GetKey()] = string(h.GetHeader().GetRawValue())
	}
	if set["x-added"] != "yes" || len(set) != 1 {
		t.Fatalf("response header mutation %v: want only the plugin's header", set)
	}
	body := `{"choices":[{"text":"hi"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`
	parts := []string{body[:30], body[30:]}
	for i, p := range parts {
		send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_ResponseBody{
			ResponseBody: &extProcPb.HttpBody{Body: []byte(p), EndOfStream: i == len(parts)-1}}})
		resp, err := r.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		sr := resp.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		if string(sr.GetBody()) != p || sr.GetEndOfStream() != (i == len(parts)-1) {
			t.Fatalf("frame %d: %q eos=%v", i, sr.GetBody(), sr.GetEndOfStream())
		}
	}
	_ = r.stream.CloseSend()
	if _, err := r.stream.Recv(); err != io.EOF {
		t.Fatalf("stream end: %v", err)
	}
	if pre, eos := f.hooks.counts(); pre != 1 || eos != 1 {
		t.Fatalf("preRequests=%d eos=%d", pre, eos)
	}
}
