package extproc

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/pdgate/pdgate/cmd/internal/telemetry/telemetrytest"
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
