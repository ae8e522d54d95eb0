package telemetry

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// RecordEnded hands a phase of a sampled SDK span to the processor as an ended span of its
// own, child of that span, with the provider's resource and the tracer's scope; it records
// nothing under an unsampled parent, and goes through the SDK with any other tracer or parent.
func TestRecordEnded(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	ph := Phase{Name: "p", Start: t0, End: t0.Add(3 * time.Millisecond)}
	for _, c := range []struct {
		name      string
		sampler   sdktrace.Sampler
		ours      bool // the tracer is a *Tracer
		rootSpan  bool // ctx carries a span
		wantSpans int  // ended spans besides the parent
		wantEnded bool // the phase came as an endedSpan, not through the SDK
	}{
		{name: "sampled parent", sampler: sdktrace.AlwaysSample(), ours: true, rootSpan: true, wantSpans: 1, wantEnded: true},
		{name: "unsampled parent", sampler: sdktrace.NeverSample(), ours: true, rootSpan: true, wantSpans: 0},
		{name: "the SDK's own tracer", sampler: sdktrace.AlwaysSample(), rootSpan: true, wantSpans: 1},
		{name: "no parent span", sampler: sdktrace.AlwaysSample(), ours: true, wantSpans: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithSampler(c.sampler))
			var tr trace.Tracer = tp.Tracer("scope")
			if c.ours {
				tr = NewTracer(tr, rec)
			}
			ctx := context.Background()
			var root trace.Span
			if c.rootSpan {
				ctx, root = tr.Start(ctx, "root")
			}
			attrs := []attribute.KeyValue{attribute.String("k", "v")}
			RecordEnded(ctx, tr, "phase", ph, attrs)
			got := rec.Ended()
			if len(got) != c.wantSpans {
				t.Fatalf("%d spans ended, want %d", len(got), c.wantSpans)
			}
			if c.wantSpans == 0 {
				return
			}
			s := got[0]
			if _, ended := s.(*endedSpan); ended != c.wantEnded {
				t.Fatalf("handed over as an ended span: %v, want %v", ended, c.wantEnded)
			}
			stub := tracetest.SpanStubFromReadOnlySpan(s) // every method of the span, as an exporter reads it
			if stub.Name != "phase" || !stub.StartTime.Equal(ph.Start) || !stub.EndTime.Equal(ph.End) ||
				len(stub.Attributes) != 1 || stub.Attributes[0] != attrs[0] || stub.SpanKind != trace.SpanKindInternal {
				t.Errorf("span %+v", stub)
			}
			if stub.Resource == nil || stub.InstrumentationScope.Name != "scope" {
				t.Errorf("resource %v, scope %v; want the provider's and %q", stub.Resource, stub.InstrumentationScope, "scope")
			}
			if !stub.SpanContext.IsSampled() || !stub.SpanContext.SpanID().IsValid() {
				t.Errorf("span context %v, want sampled with a span ID", stub.SpanContext)
			}
			if root != nil {
				if stub.Resource != root.(sdktrace.ReadOnlySpan).Resource() {
					t.Error("the phase's resource is not its parent's")
				}
				psc := root.SpanContext()
				if stub.Parent.SpanID() != psc.SpanID() || stub.SpanContext.TraceID() != psc.TraceID() || stub.SpanContext.SpanID() == psc.SpanID() {
					t.Errorf("span %v parent %v, want a new span of trace %v under %v", stub.SpanContext, stub.Parent, psc.TraceID(), psc.SpanID())
				}
			}
		})
	}
}
