package extproc

import (
	"context"
	"errors"
	"io"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdgate/pdgate/cmd/internal/telemetry/telemetrytest"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// A traced request continues the gateway's traceparent with GIE's span names, times the
// queue and scheduling phases under them, and hands upstream a traceparent whose parent is
// the EPP's gateway.request span (GIE's EPP injected its trace headers the same way).
func TestRequestSpans(t *testing.T) {
	rec := telemetrytest.New()
	f := start(t, &fixture{opts: Options{Tracer: rec.Tracer}})
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
	for name, parent := range map[string]string{SpanQueue: SpanRequest, SpanOrchestration: SpanRequest, SpanScheduling: SpanOrchestration} {
		s := spans[name]
		if s == nil || s.Parent().SpanID() != spans[parent].SpanContext().SpanID() {
			t.Fatalf("%s missing or not under %s", name, parent)
		}
	}
	if !spans[SpanScheduling].StartTime().Equal(spans[SpanQueue].EndTime()) {
		t.Error("scheduling does not start where the queue phase ended")
	}
	sc := telemetrytest.SpanContext(r.set["traceparent"])
	if sc.SpanID() != req.SpanContext().SpanID() || sc.TraceID() != req.SpanContext().TraceID() {
		t.Errorf("upstream traceparent %q, want gateway.request %s", r.set["traceparent"], req.SpanContext().SpanID())
	}
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
// included) with tracing off and on (every request sampled, spans batched to an exporter that
// drops them): what --tracing costs the EPP per request, measured in the same run.
func BenchmarkTracing(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		var opts Options
		if on {
			name = "on"
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
			b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			opts.Tracer = tp.Tracer("bench")
		}
		b.Run(name, func(b *testing.B) {
			f := start(b, &fixture{opts: opts})
			hdr := map[string]string{"traceparent": telemetrytest.ClientTraceparent}
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				r := f.run(b, hdr, completion)
				_ = r.stream.CloseSend()
				_, _ = r.stream.Recv()
			}
			b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}

// processCPU is the process's user+system CPU time (the EPP's and the client's: one process).
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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
