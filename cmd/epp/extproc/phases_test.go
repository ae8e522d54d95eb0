package extproc

import (
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/pdgate/pdgate/cmd/internal/telemetry"
	"github.com/pdgate/pdgate/cmd/internal/telemetry/telemetrytest"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
)

// A traced request continues the gateway's traceparent with GIE's span names, times the
// queue and scheduling phases under them, and hands upstream a traceparent whose parent is
// the EPP's gateway.request span (GIE's EPP injected its trace headers the same way): with the
// EPP's tracer (the phases handed over as ended spans) and with a plain SDK tracer.
func TestRequestSpans(t *testing.T) {
	for _, ended := range []bool{true, false} {
		t.Run(map[bool]string{true: "ended spans", false: "sdk spans"}[ended], func(t *testing.T) {
			rec := telemetrytest.New()
			var tr trace.Tracer = rec.Tracer
			if ended {
				tr = telemetry.NewTracer(rec.Tracer, rec.Processor())
			}
			checkRequestSpans(t, rec, tr)
		})
	}
}

func checkRequestSpans(t *testing.T, rec *telemetrytest.Recorder, tr trace.Tracer) {
	f := start(t, &fixture{opts: Options{Tracer: tr}})
	r := f.run(t, map[string]string{"traceparent": telemetrytest.ClientTraceparent}, completion)
	if err := r.stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.stream.Recv(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream end: %v", err)
	}
	spans := rec.Ended()
	for deadline := time.Now().Add(5 * time.Second); spans[SpanRequest] == nil && time.Now().Before(deadline); spans = rec.Ended() {
		time.Sleep(5 * time.Millisecond) // the span ends when Process returns
	}
	req := spans[SpanRequest]
	if req == nil || req.Parent().SpanID().String() != telemetrytest.ClientSpanID || req.SpanKind() != trace.SpanKindServer {
		t.Fatalf("gateway.request %v does not continue the gateway's traceparent", req)
	}
	for name, phase := range map[string]string{SpanQueue: PhaseQueue, SpanOrchestration: PhaseScheduling} {
		s := spans[name]
		if s == nil || s.Parent().SpanID() != req.SpanContext().SpanID() || s.SpanContext().TraceID() != req.SpanContext().TraceID() {
			t.Fatalf("%s missing or not under %s", name, SpanRequest)
		}
		if !s.SpanContext().IsSampled() || !s.SpanContext().SpanID().IsValid() || s.SpanContext().SpanID() == req.SpanContext().SpanID() {
			t.Errorf("%s: span context %v, want a sampled one of its own", name, s.SpanContext())
		}
		if s.Resource() != req.Resource() || s.InstrumentationScope() != req.InstrumentationScope() || s.SpanKind() != trace.SpanKindInternal {
			t.Errorf("%s: resource, scope or kind differ from the request span's", name)
		}
		if got := attrs(s)[AttrPhase]; got != phase {
			t.Errorf("%s: %s = %q, want %q", name, AttrPhase, got, phase)
		}
		if s.EndTime().Before(s.StartTime()) || s.StartTime().Before(req.StartTime()) {
			t.Errorf("%s: [%v, %v] is not a phase inside the request [%v, ...]", name, s.StartTime(), s.EndTime(), req.StartTime())
		}
	}
	if a := attrs(spans[SpanOrchestration]); a["target_model"] == "" || a["request_prio"] == "" {
		t.Errorf("%s attributes %v, want target_model and request_prio", SpanOrchestration, a)
	}
	if !spans[SpanOrchestration].StartTime().Equal(spans[SpanQueue].EndTime()) {
		t.Error("scheduling does not start where the queue phase ended")
	}
	if len(spans) != 3 {
		t.Errorf("spans %v, want 3: request, queue, orchestration", spans)
	}
	sc := telemetrytest.SpanContext(r.set["traceparent"])
	if sc.SpanID() != req.SpanContext().SpanID() || sc.TraceID() != req.SpanContext().TraceID() {
		t.Errorf("upstream traceparent %q, want gateway.request %s", r.set["traceparent"], req.SpanContext().SpanID())
	}
}

// attrs is a span's attributes as strings by key.
func attrs(s sdktrace.ReadOnlySpan) map[string]string {
	out := map[string]string{}
	for _, a := range s.Attributes() {
		out[string(a.Key)] = a.Value.Emit()
	}
	return out
}

// Tracing off costs the request path no allocation: no tracer call, no context.
func TestTimelineOffAllocatesNothing(t *testing.T) {
	x := &exchange{s: &Server{}, headers: map[string]string{"traceparent": telemetrytest.ClientTraceparent},
		received: time.Now()}
	x.tl.admitted, x.tl.decided = time.Now(), time.Now()
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
// TraceService in the process), on with the EPP's span processor (telemetry.Batcher) and with
// the SDK's batch span processor it replaced (on-sdk-batcher): what --tracing costs the EPP per
// request, measured in the same run. Under callgrind (GOMAXPROCS=1) the difference of two
// -benchtime counts gives instructions per request.
func BenchmarkTracing(b *testing.B) {
	for _, name := range []string{"off", "on", "on-sdk-batcher"} {
		var opts Options
		if name != "off" {
			var proc sdktrace.SpanProcessor = telemetry.NewBatcher(otlpExporter(b), telemetry.DefaultBatchConfig)
			if name == "on-sdk-batcher" {
				proc = sdktrace.NewBatchSpanProcessor(otlpExporter(b))
			}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(proc))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			opts.Tracer = tp.Tracer("bench")
		}
		b.Run(name, func(b *testing.B) {
			f := start(b, &fixture{opts: opts})
			hdr := map[string]string{"traceparent": telemetrytest.ClientTraceparent}
			b.ReportAllocs()
			cpu0 := testsupport.ProcessCPU()
			for b.Loop() {
				r := f.run(b, hdr, completion)
				_ = r.stream.CloseSend()
				_, _ = r.stream.Recv()
			}
			b.ReportMetric(float64((testsupport.ProcessCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// otlpExporter is the OTLP gRPC exporter the EPP uses, sending to a TraceService in the
// process that takes every export and keeps nothing.
func otlpExporter(b *testing.B) sdktrace.SpanExporter {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, discardTraces{})
	go func() { _ = srv.Serve(l) }()
	b.Cleanup(srv.Stop)
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(l.Addr().String()), otlptracegrpc.WithInsecure())
	if err != nil {
		b.Fatal(err)
	}
	return exp
}

// discardTraces is an OTLP TraceService that accepts every export. The generated interface
// requires the Unimplemented embed; Export, its only RPC, is implemented.
type discardTraces struct {
	coltrace.UnimplementedTraceServiceServer
}

func (discardTraces) Export(context.Context, *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	return &coltrace.ExportTraceServiceResponse{}, nil
}

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
