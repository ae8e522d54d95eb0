package telemetry

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// uploader is also an otlptrace.Client, so that the SDK's OTLP exporter can upload to it.
func (*uploader) Start(context.Context) error { return nil }
func (*uploader) Stop(context.Context) error  { return nil }

var _ otlptrace.Client = (*uploader)(nil)

// The OTLP messages built from records are the SDK exporter's messages for the same spans,
// field for field: every attribute type, kinds, status, a remote and a local parent, trace
// state, the resource with its schema URL and the scope. The batch's reused messages stay
// right from one build to the next, smaller and larger.
func TestOTLPBatchMatchesTheSDKExporter(t *testing.T) {
	res := resource.NewWithAttributes("https://opentelemetry.io/schemas/1.26.0",
		attribute.String("service.name", "svc"), attribute.Int("n", 3))
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec), sdktrace.WithResource(res))
	tr := tp.Tracer("scope")
	t0 := time.Unix(1700000000, 123)
	root, req := tr.Start(remoteParent(true), "gateway.request", trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(t0),
		trace.WithAttributes(attribute.String("pdgate.request_id", "r1"), attribute.Int("request_prio", -2),
			attribute.Bool("b", true), attribute.Float64("f", 0.5), attribute.StringSlice("ss", []string{"a", "b"}),
			attribute.Int64Slice("is", []int64{1, 2}), attribute.BoolSlice("bs", []bool{false}), attribute.Float64Slice("fs", []float64{1.5})))
	_, ph := tr.Start(root, "pdgate.epp.queue", trace.WithTimestamp(t0.Add(time.Microsecond)),
		trace.WithAttributes(attribute.String("pdgate.phase", "epp_queue")))
	ph.End(trace.WithTimestamp(t0.Add(time.Millisecond)))
	_, ok := tr.Start(root, "ok", trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(t0))
	ok.SetStatus(codes.Ok, "")
	ok.End(trace.WithTimestamp(t0.Add(2 * time.Millisecond)))
	req.SetStatus(codes.Error, "NotFound")
	req.End(trace.WithTimestamp(t0.Add(3 * time.Millisecond)))
	spans := rec.Ended()

	org := newOrigin(res, instrumentation.Scope{Name: "scope"})
	var batch otlpBatch
	for _, n := range []int{3, 1, 3} {
		sdk := &uploader{}
		exp, err := otlptrace.New(context.Background(), sdk)
		if err != nil {
			t.Fatal(err)
		}
		if err := exp.ExportSpans(context.Background(), spans[:n]); err != nil {
			t.Fatal(err)
		}
		recs := make([]record, n)
		for i, s := range spans[:n] {
			recs[i] = record{origin: org, name: s.Name(), kind: s.SpanKind(), sc: s.SpanContext(), parent: s.Parent().SpanID(),
				parentRemote: s.Parent().IsRemote(), start: s.StartTime(), end: s.EndTime(), attrs: s.Attributes(),
				status: s.Status().Code, statusDesc: s.Status().Description}
		}
		got := batch.build(recs)
		want := sdk.batches[0]
		if len(got) != len(want) {
			t.Fatalf("%d spans: %d resource spans, the SDK's exporter %d", n, len(got), len(want))
		}
		for i := range got {
			if !proto.Equal(got[i], want[i]) {
				t.Fatalf("%d spans:\n got %v\nwant %v", n, got[i], want[i])
			}
		}
	}
}

// Records of several tracers go out as one ResourceSpans per tracer, each with its own spans.
func TestOTLPBatchGroupsByOrigin(t *testing.T) {
	a := newOrigin(resource.NewSchemaless(attribute.String("service.name", "a")), instrumentation.Scope{Name: "a"})
	b := newOrigin(resource.NewSchemaless(attribute.String("service.name", "b")), instrumentation.Scope{Name: "b"})
	var batch otlpBatch
	got := batch.build([]record{{origin: a, name: "a1"}, {origin: b, name: "b1"}, {origin: a, name: "a2"}})
	names := func(rs *tracepb.ResourceSpans) (out []string) {
		for _, s := range rs.ScopeSpans[0].Spans {
			out = append(out, s.Name)
		}
		return out
	}
	if len(got) != 2 || got[0].ScopeSpans[0].Scope.GetName() != "a" || got[1].ScopeSpans[0].Scope.GetName() != "b" ||
		len(names(got[0])) != 2 || names(got[0])[1] != "a2" || len(names(got[1])) != 1 || names(got[1])[0] != "b1" {
		t.Fatalf("resource spans %v, want a: [a1 a2], b: [b1]", got)
	}
}
