package telemetry

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// newTestTracer is a Tracer over a Batcher without its export goroutine (flush exports what
// is queued), uploading to the returned uploader; its provider shares the sampler.
func newTestTracer(sampler sdktrace.Sampler) (tr *Tracer, up *uploader, flush func()) {
	up = &uploader{}
	b := newBatcher(&exporter{}, up, BatchConfig{ScheduleDelay: never, ExportTimeout: time.Second, MaxQueueSize: 100, MaxExportBatchSize: 100})
	res := resource.NewSchemaless(attribute.String("service.name", "svc"))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b), sdktrace.WithSampler(sampler), sdktrace.WithResource(res))
	var sp spare
	return NewTracer(tp.Tracer("scope"), b, sampler, res, instrumentation.Scope{Name: "scope"}), up,
		func() { b.export(context.Background(), &sp) }
}

// remoteParent is ctx carrying a remote parent span context, sampled or not.
func remoteParent(sampled bool) context.Context {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	if sampled {
		tp = tp[:len(tp)-2] + "01"
	}
	return Extract(context.Background(), func(k string) string {
		return map[string]string{"traceparent": tp, "tracestate": "vendor=x"}[k]
	})
}

// StartSpan decides a span as the SDK's tracer does with the same sampler and parent (the
// sampled flag, the parent's trace or a new one, a new span ID), puts its span context in the
// returned context, and records it on End only when sampled, as an OTLP span under its parent
// with the tracer's resource and scope; RecordEnded records a phase under it the same way.
func TestStartSpan(t *testing.T) {
	for _, c := range []struct {
		name        string
		sampler     sdktrace.Sampler
		parent      int // 0 none, 1 sampled remote, 2 unsampled remote
		wantSampled bool
	}{
		{name: "root, parent-based always on", sampler: sdktrace.ParentBased(sdktrace.AlwaysSample()), wantSampled: true},
		{name: "sampled remote parent", sampler: sdktrace.ParentBased(sdktrace.AlwaysSample()), parent: 1, wantSampled: true},
		{name: "unsampled remote parent", sampler: sdktrace.ParentBased(sdktrace.AlwaysSample()), parent: 2},
		{name: "always off", sampler: sdktrace.NeverSample()},
		{name: "ratio 0 under a sampled parent", sampler: sdktrace.TraceIDRatioBased(0), parent: 1},
		{name: "always on under an unsampled parent", sampler: sdktrace.AlwaysSample(), parent: 2, wantSampled: true},
		{name: "parent-based always off, sampled parent", sampler: sdktrace.ParentBased(sdktrace.NeverSample()), parent: 1, wantSampled: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			tr, up, flush := newTestTracer(c.sampler)
			parent := context.Background()
			if c.parent > 0 {
				parent = remoteParent(c.parent == 1)
			}
			psc := trace.SpanContextFromContext(parent)
			t0 := time.Unix(1700000000, 0)
			ctx, s := StartSpan(parent, tr, "req", trace.SpanKindServer, t0, []attribute.KeyValue{attribute.String("k", "v")})
			RecordEnded(ctx, tr, "phase", Phase{Start: t0, End: t0.Add(time.Millisecond)}, nil)
			s.End(t0.Add(2*time.Millisecond), codes.Error, "boom")
			s.End(t0.Add(3*time.Millisecond), codes.Unset, "") // a second End records nothing

			sc := trace.SpanContextFromContext(ctx)
			_, sdk := tr.Start(parent, "req") // the SDK's decision for the same sampler and parent
			if sc.IsSampled() != c.wantSampled || sdk.SpanContext().IsSampled() != c.wantSampled {
				t.Fatalf("sampled %v, the SDK's %v; want %v", sc.IsSampled(), sdk.SpanContext().IsSampled(), c.wantSampled)
			}
			if !sc.SpanID().IsValid() || sc.SpanID() == psc.SpanID() || !sc.TraceID().IsValid() ||
				psc.IsValid() && sc.TraceID() != psc.TraceID() {
				t.Fatalf("span context %v under parent %v, want a new span in the parent's trace", sc, psc)
			}
			flush()
			spans := up.spans()
			if !c.wantSampled {
				if len(spans) != 0 {
					t.Fatalf("%d spans recorded for an unsampled request", len(spans))
				}
				return
			}
			if len(spans) != 2 {
				t.Fatalf("%d spans recorded, want the request and its phase", len(spans))
			}
			ph, req := spans[0], spans[1]
			wantFlags := uint32(trace.FlagsSampled) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
			if c.parent > 0 {
				wantFlags |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
			}
			if req.Name != "req" || req.Kind != tracepb.Span_SPAN_KIND_SERVER || trace.SpanID(req.SpanId) != sc.SpanID() ||
				trace.TraceID(req.TraceId) != sc.TraceID() || req.Flags != wantFlags ||
				req.StartTimeUnixNano != uint64(t0.UnixNano()) || req.EndTimeUnixNano != uint64(t0.Add(2*time.Millisecond).UnixNano()) ||
				req.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || req.Status.GetMessage() != "boom" ||
				len(req.Attributes) != 1 || req.Attributes[0].Key != "k" || req.Attributes[0].Value.GetStringValue() != "v" {
				t.Errorf("request span %v", req)
			}
			if c.parent > 0 && (trace.SpanID(req.ParentSpanId) != psc.SpanID() || req.TraceState != "vendor=x") ||
				c.parent == 0 && len(req.ParentSpanId) != 0 {
				t.Errorf("request span parent %x trace state %q, want %v", req.ParentSpanId, req.TraceState, psc)
			}
			if ph.Name != "phase" || ph.Kind != tracepb.Span_SPAN_KIND_INTERNAL || trace.SpanID(ph.ParentSpanId) != sc.SpanID() ||
				trace.TraceID(ph.TraceId) != sc.TraceID() || trace.SpanID(ph.SpanId) == sc.SpanID() ||
				ph.Flags&uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK) != 0 {
				t.Errorf("phase span %v, want a local child of the request span", ph)
			}
			rs := up.batches[0][0]
			if a := rs.Resource.GetAttributes(); len(a) != 1 || a[0].Value.GetStringValue() != "svc" ||
				rs.ScopeSpans[0].Scope.GetName() != "scope" {
				t.Errorf("resource %v scope %v, want the tracer's", rs.Resource, rs.ScopeSpans[0].Scope)
			}
		})
	}
}

// With a tracer that is not a *Tracer, StartSpan and RecordEnded are the SDK's spans.
func TestStartSpanSDKTracer(t *testing.T) {
	exp := &exporter{}
	b := newBatcher(exp, &uploader{}, BatchConfig{ScheduleDelay: never, ExportTimeout: time.Second, MaxQueueSize: 100, MaxExportBatchSize: 100})
	tr := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b)).Tracer("scope")
	ctx, s := StartSpan(context.Background(), tr, "req", trace.SpanKindServer, time.Now(), nil)
	RecordEnded(ctx, tr, "phase", Phase{Start: time.Now(), End: time.Now()}, nil)
	s.End(time.Now(), codes.Unset, "")
	b.export(context.Background(), &spare{})
	if got := exp.sizes(); !equalInts(got, []int{2}) {
		t.Fatalf("SDK spans exported %v, want [2]", got)
	}
}

// A sampled phase is handed over without an allocation: the sampler's decision, the span
// context and the append to the queue allocate nothing.
func TestRecordEndedAllocatesNothing(t *testing.T) {
	tr, _, _ := newTestTracer(sdktrace.ParentBased(sdktrace.AlwaysSample()))
	ctx, _ := StartSpan(remoteParent(true), tr, "req", trace.SpanKindServer, time.Now(), nil)
	ph := Phase{Start: time.Now(), End: time.Now()}
	attrs := []attribute.KeyValue{attribute.String("k", "v")}
	if n := testing.AllocsPerRun(50, func() { RecordEnded(ctx, tr, "phase", ph, attrs) }); n != 0 {
		t.Fatalf("%v allocations per phase, want 0", n)
	}
}
