package extproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/pdgate/pdgate/cmd/internal/telemetry"
	"github.com/pdgate/pdgate/cmd/internal/telemetry/telemetrytest"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
)

// A traced request continues the gateway's traceparent with GIE's span names, times the
// queue and scheduling phases under them, and hands upstream a traceparent whose parent is
// the EPP's gateway.request span (GIE's EPP injected its trace headers the same way): with the
// EPP's tracer (its spans recorded by pdgate and exported over OTLP gRPC to a TraceService in
// the process) and with a plain SDK tracer.
func TestRequestSpans(t *testing.T) {
	t.Run("epp tracer over otlp", func(t *testing.T) {
		col := &captureTraces{}
		tracing, err := telemetry.NewTracing(context.Background(), otlpClient(t, col), telemetry.DefaultBatchConfig,
			sdktrace.ParentBased(sdktrace.AlwaysSample()), resource.Default(), "test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tracing.Close(time.Second) })
		checkRequestSpans(t, tracing.Tracer(), func() map[string]spanView {
			if err := tracing.ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}
			return col.spans()
		})
	})
	t.Run("sdk spans", func(t *testing.T) {
		rec := telemetrytest.New()
		checkRequestSpans(t, rec.Tracer, func() map[string]spanView {
			out := map[string]spanView{}
			for name, s := range rec.Ended() {
				out[name] = sdkView(s)
			}
			return out
		})
	})
}

func checkRequestSpans(t *testing.T, tr trace.Tracer, ended func() map[string]spanView) {
	f := start(t, &fixture{opts: Options{Tracer: tr}})
	r := f.run(t, map[string]string{"traceparent": telemetrytest.ClientTraceparent}, completion)
	if err := r.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v", err)
	}
	spans := ended()
	for deadline := time.Now().Add(5 * time.Second); spans[SpanRequest].name == "" && time.Now().Before(deadline); spans = ended() {
		time.Sleep(5 * time.Millisecond) // the span ends when Process returns
	}
	req := spans[SpanRequest]
	if req.name == "" || req.parent.String() != telemetrytest.ClientSpanID || req.traceID.String() != telemetrytest.ClientTraceID ||
		req.kind != trace.SpanKindServer || !req.sampled {
		t.Fatalf("gateway.request %+v does not continue the gateway's traceparent", req)
	}
	if req.attrs["pdgate.request_id"] == "" {
		t.Errorf("gateway.request attributes %v, want pdgate.request_id", req.attrs)
	}
	for name, phase := range map[string]string{SpanQueue: PhaseQueue, SpanOrchestration: PhaseScheduling} {
		s := spans[name]
		if s.name == "" || s.parent != req.spanID || s.traceID != req.traceID {
			t.Fatalf("%s missing or not under %s", name, SpanRequest)
		}
		if !s.sampled || !s.spanID.IsValid() || s.spanID == req.spanID {
			t.Errorf("%s: span %s sampled %v, want a sampled one of its own", name, s.spanID, s.sampled)
		}
		if s.origin != req.origin || s.kind != trace.SpanKindInternal {
			t.Errorf("%s: resource, scope or kind differ from the request span's", name)
		}
		if got := s.attrs[AttrPhase]; got != phase {
			t.Errorf("%s: %s = %q, want %q", name, AttrPhase, got, phase)
		}
		if s.end.Before(s.start) || s.start.Before(req.start) || req.end.Before(s.end) {
			t.Errorf("%s: [%v, %v] is not a phase inside the request [%v, %v]", name, s.start, s.end, req.start, req.end)
		}
	}
	if a := spans[SpanOrchestration].attrs; a["target_model"] == "" || a["request_prio"] == "" {
		t.Errorf("%s attributes %v, want target_model and request_prio", SpanOrchestration, a)
	}
	if !spans[SpanOrchestration].start.Equal(spans[SpanQueue].end) {
		t.Error("scheduling does not start where the queue phase ended")
	}
	if len(spans) != 3 {
		t.Errorf("spans %v, want 3: request, queue, orchestration", spans)
	}
	sc := telemetrytest.SpanContext(r.set["traceparent"])
	if sc.SpanID() != req.spanID || sc.TraceID() != req.traceID || !sc.IsSampled() {
		t.Errorf("upstream traceparent %q, want gateway.request %s, sampled", r.set["traceparent"], req.spanID)
	}
}

// spanView is what the test reads of a span, from the SDK's spans and from OTLP alike.
type spanView struct {
	name           string
	traceID        trace.TraceID
	spanID, parent trace.SpanID
	kind           trace.SpanKind
	sampled        bool
	start, end     time.Time
	attrs          map[string]string
	origin         string // the resource and instrumentation scope
}

func sdkView(s sdktrace.ReadOnlySpan) spanView {
	v := spanView{name: s.Name(), traceID: s.SpanContext().TraceID(), spanID: s.SpanContext().SpanID(), parent: s.Parent().SpanID(),
		kind: s.SpanKind(), sampled: s.SpanContext().IsSampled(), start: s.StartTime(), end: s.EndTime(),
		attrs: map[string]string{}, origin: s.Resource().String() + "/" + s.InstrumentationScope().Name}
	for _, a := range s.Attributes() {
		v.attrs[string(a.Key)] = a.Value.Emit()
	}
	return v
}

// captureTraces is an OTLP TraceService that keeps the spans of every export. The generated
// interface requires the Unimplemented embed; Export, its only RPC, is implemented.
type captureTraces struct {
	coltrace.UnimplementedTraceServiceServer
	mu  sync.Mutex
	got map[string]spanView
}

func (c *captureTraces) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got == nil {
		c.got = map[string]spanView{}
	}
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				v := spanView{name: s.Name, traceID: trace.TraceID(s.TraceId), spanID: trace.SpanID(s.SpanId),
					kind: trace.SpanKind(s.Kind), sampled: s.Flags&uint32(trace.FlagsSampled) != 0,
					start: time.Unix(0, int64(s.StartTimeUnixNano)), end: time.Unix(0, int64(s.EndTimeUnixNano)),
					attrs: map[string]string{}, origin: rs.Resource.String() + "/" + ss.Scope.GetName()}
				if len(s.ParentSpanId) == 8 {
					v.parent = trace.SpanID(s.ParentSpanId)
				}
				for _, a := range s.Attributes {
					if sv, ok := a.Value.Value.(*commonpb.AnyValue_StringValue); ok {
						v.attrs[a.Key] = sv.StringValue
					} else {
						v.attrs[a.Key] = strconv.FormatInt(a.Value.GetIntValue(), 10)
					}
				}
				c.got[s.Name] = v
			}
		}
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func (c *captureTraces) spans() map[string]spanView {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.got)
}

// Tracing off costs the request path no allocation: no tracer call, no context.
func TestTimelineOffAllocatesNothing(t *testing.T) {
	x := readHeaders(&Server{}, map[string]string{"traceparent": telemetrytest.ClientTraceparent})
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() {
		x.startRequestSpan(ctx)
		x.recordDecision(true)
		x.endRequestSpan()
	}); n != 0 {
		t.Fatalf("%v allocations per request with tracing off, want 0", n)
	}
}

// BenchmarkTracing is the request path's cost (request phase over in-memory gRPC, client
// included) with tracing off and on (every request sampled, exported over OTLP gRPC to a real
// TraceService in the process, which leaves the spans undecoded: a collector decodes them in its
// own process): on with the EPP's tracer (its spans recorded by pdgate and
// batched by telemetry.Batcher, as bin/epp runs), and on-sdk with the SDK's tracer and batch
// span processor: what --tracing costs the EPP per request, measured in the same run. Under
// callgrind (GOMAXPROCS=1) the difference of two -benchtime counts gives instructions per
// request. Each runs at 1 KB and 16 KB bodies: nothing tracing does reads the body, so what it
// adds must be the same at both.
func BenchmarkTracing(b *testing.B) {
	for _, name := range []string{"off", "on", "on-sdk"} {
		var opts Options
		switch name {
		case "on":
			tracing, err := telemetry.NewTracing(context.Background(),
				otlpClient(b, discardTraces{}, grpc.ForceServerCodec(undecoded{})), telemetry.DefaultBatchConfig,
				sdktrace.ParentBased(sdktrace.AlwaysSample()), resource.Default(), "bench")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = tracing.Close(time.Second) })
			opts.Tracer = tracing.Tracer()
		case "on-sdk":
			exp, err := otlptrace.New(context.Background(), otlpClient(b, discardTraces{}, grpc.ForceServerCodec(undecoded{})))
			if err != nil {
				b.Fatal(err)
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			opts.Tracer = tp.Tracer("bench")
		}
		for _, size := range []int{1 << 10, 16 << 10} {
			body := completionOf(size)
			b.Run(fmt.Sprintf("%s/%dKB", name, size>>10), func(b *testing.B) {
				f := start(b, &fixture{opts: opts})
				hdr := map[string]string{"traceparent": telemetrytest.ClientTraceparent}
				b.ReportAllocs()
				cpu0 := testsupport.ProcessCPU()
				for b.Loop() {
					r := f.run(b, hdr, body)
					_ = r.stream.CloseSend()
					_, _ = r.stream.Recv()
				}
				b.ReportMetric(float64((testsupport.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

// completionOf is a completion request of about size bytes: the bench's body sizes, so that a
// cost of tracing that grew with the body would show between them.
func completionOf(size int) string {
	const head, tail = `{"model":"m","prompt":"`, `","max_tokens":3}`
	return head + strings.Repeat("hello world ", max(1, (size-len(head)-len(tail))/12)) + tail
}

// otlpClient is the OTLP gRPC client the EPP uses, its request encoder included, sending to
// srv, a TraceService in the process that decodes with the standard codec, or with opts'
// codec.
func otlpClient(tb testing.TB, srv coltrace.TraceServiceServer, opts ...grpc.ServerOption) otlptrace.Client {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	gs := grpc.NewServer(opts...)
	coltrace.RegisterTraceServiceServer(gs, srv)
	go func() { _ = gs.Serve(l) }()
	tb.Cleanup(gs.Stop)
	return telemetry.NewOTLPClient(otlptracegrpc.WithEndpoint(l.Addr().String()), otlptracegrpc.WithInsecure())
}

// discardTraces is an OTLP TraceService that accepts every export. The generated interface
// requires the Unimplemented embed; Export, its only RPC, is implemented.
type discardTraces struct {
	coltrace.UnimplementedTraceServiceServer
}

func (discardTraces) Export(context.Context, *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// undecoded is a server codec that leaves requests undecoded: with it a TraceService in the
// benchmark's process costs the process no protobuf decoding of the spans, work the collector
// does in its own process, not the EPP.
type undecoded struct{}

func (undecoded) Marshal(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }
func (undecoded) Unmarshal([]byte, any) error   { return nil }
func (undecoded) Name() string                  { return "proto" }

// A client that asks for a trace where traces are allowed gets the EPP's phases in
// Server-Timing, ahead of the upstream's (the sidecar's); without the ask it gets nothing.
func TestServerTiming(t *testing.T) {
	for _, asked := range []bool{false, true} {
		f := start(t, &fixture{opts: Options{AllowTrace: true}})
		hdr := map[string]string{}
		if asked {
			hdr[protocol.HeaderTrace] = "1"
		}
		r := f.run(t, hdr, completion)
		if err := r.stream.Send(&extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extProcPb.HttpHeaders{
			Headers: &configPb.HeaderMap{Headers: []*configPb.HeaderValue{{Key: ":status", RawValue: []byte("200")},
				{Key: "Server-Timing", RawValue: []byte("prefill;dur=12.000")}}}}}}); err != nil {
			t.Fatal(err)
		}
		resp, err := r.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		for _, h := range resp.GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
			if strings.EqualFold(h.GetHeader().GetKey(), "server-timing") {
				got = string(h.GetHeader().GetRawValue())
			}
		}
		want := regexp.MustCompile(`^epp_queue;dur=[0-9.]+, epp_scheduling;dur=[0-9.]+, prefill;dur=12\.000$`)
		if asked && !want.MatchString(got) || !asked && got != "" {
			t.Errorf("asked %v: Server-Timing set to %q", asked, got)
		}
	}
}

// With the EPP's tracer a traced request's three spans cost the request path 7 allocations
// (the extracted and the request span's contexts, the attribute slices, the traceparent sent
// upstream); the SDK's tracer made 35 (each span's state, options, snapshot and context).
func TestTimelineTracedAllocations(t *testing.T) {
	tracing, err := telemetry.NewTracing(context.Background(), otlpClient(t, discardTraces{}), telemetry.DefaultBatchConfig,
		sdktrace.ParentBased(sdktrace.AlwaysSample()), resource.Default(), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tracing.Close(time.Second) })
	x := readHeaders(&Server{opts: Options{Tracer: tracing.Tracer()}}, map[string]string{"traceparent": telemetrytest.ClientTraceparent})
	if n := testing.AllocsPerRun(100, func() {
		x.startRequestSpan(context.Background())
		x.recordDecision(true)
		x.endRequestSpan()
	}); n > 7 {
		t.Fatalf("%v allocations per traced request, want at most 7", n)
	}
}
