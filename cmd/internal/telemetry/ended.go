package telemetry

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Tracer is the SDK's tracer together with what it takes to record spans without the SDK:
// the Batcher behind the provider, the provider's sampler, resource and this tracer's scope.
// Its Start still makes the SDK's spans; StartSpan and RecordEnded record their spans as plain
// values that the Batcher converts to OTLP itself (see record).
type Tracer struct {
	trace.Tracer
	b       *Batcher
	sampler sdktrace.Sampler
	origin  *origin
}

// NewTracer pairs tr with b, the span processor of tr's provider; sampler, res and scope must
// be the provider's sampler and resource and tr's scope, so that the spans recorded here and
// those the SDK makes are decided and labelled alike.
func NewTracer(tr trace.Tracer, b *Batcher, sampler sdktrace.Sampler, res *resource.Resource, scope instrumentation.Scope) *Tracer {
	return &Tracer{Tracer: tr, b: b, sampler: sampler, origin: newOrigin(res, scope)}
}

// record is a span as the Batcher queues it: a value with nothing to lock or snapshot, and
// nothing the request path allocates besides the attributes' slice. The SDK builds a live
// span (its state, lock, options), a context, and at the end a snapshot of it; its exporter
// then converts that snapshot to OTLP through interface calls and a map per batch.
type record struct {
	origin       *origin
	name         string
	kind         trace.SpanKind
	sc           trace.SpanContext
	parent       trace.SpanID
	parentRemote bool
	start, end   time.Time
	attrs        []attribute.KeyValue
	status       codes.Code
	statusDesc   string
}

// Span is a span recorded when it ends (StartSpan). The zero value is a span not recorded.
type Span struct {
	sdk trace.Span // the SDK's span, when the tracer is not a *Tracer
	b   *Batcher   // nil when the span is not sampled
	rec record
}

// StartSpan starts a span named name at start, a child of ctx's span (a remote parent from
// Extract included), and returns ctx carrying its span context for children and Inject. With
// a *Tracer nothing is allocated beyond that context: the span is decided by the provider's
// sampler as the SDK decides it (the parent's trace ID or a new one, a new span ID, the
// sampler's trace state; an unsampled span is propagated but never recorded) and is handed to
// the Batcher by End. With any other tracer it is the SDK's span. attrs is kept by the span:
// the caller must not change it afterwards.
func StartSpan(ctx context.Context, tr trace.Tracer, name string, kind trace.SpanKind, start time.Time,
	attrs []attribute.KeyValue) (context.Context, Span) {
	t, ok := tr.(*Tracer)
	if !ok {
		ctx, s := tr.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
		return ctx, Span{sdk: s}
	}
	s := t.start(ctx, name, kind, start, attrs)
	return trace.ContextWithSpanContext(ctx, s.rec.sc), s
}

// start decides and builds a span, as the SDK's tracer does in Start.
func (t *Tracer) start(ctx context.Context, name string, kind trace.SpanKind, start time.Time, attrs []attribute.KeyValue) Span {
	psc := trace.SpanContextFromContext(ctx)
	tid := psc.TraceID()
	if !psc.IsValid() {
		tid = newTraceID()
	}
	res := t.sampler.ShouldSample(sdktrace.SamplingParameters{ParentContext: ctx, TraceID: tid, Name: name, Kind: kind, Attributes: attrs})
	flags := psc.TraceFlags() &^ trace.FlagsSampled
	sampled := res.Decision == sdktrace.RecordAndSample
	if sampled {
		flags |= trace.FlagsSampled
	}
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: newSpanID(), TraceFlags: flags, TraceState: res.Tracestate})
	s := Span{rec: record{sc: sc}}
	if !sampled {
		return s
	}
	if len(res.Attributes) > 0 {
		attrs = append(attrs[:len(attrs):len(attrs)], res.Attributes...)
	}
	s.b = t.b
	s.rec = record{origin: t.origin, name: name, kind: kind, sc: sc, start: start, attrs: attrs}
	if psc.IsValid() {
		s.rec.parent, s.rec.parentRemote = psc.SpanID(), psc.IsRemote()
	}
	return s
}

// End ends the span at end with a status (codes.Unset and "" for none).
func (s *Span) End(end time.Time, code codes.Code, desc string) {
	if s.sdk != nil {
		if code != codes.Unset {
			s.sdk.SetStatus(code, desc)
		}
		s.sdk.End(trace.WithTimestamp(end))
		return
	}
	if s.b == nil {
		return
	}
	s.rec.end = end
	if code == codes.Error {
		// As the SDK's SetStatus: only an error keeps its description.
		s.rec.status, s.rec.statusDesc = code, desc
	} else {
		s.rec.status = code
	}
	s.b.onEndRecord(s.rec)
	s.b = nil // ending twice records once, as with the SDK
}

// RecordEnded records the phase p as an ended child span of ctx's span, like Record, and
// returns nothing: no later hop names it as parent. With a *Tracer it costs a sampler call and
// an append to the Batcher's queue (the parent-based samplers follow the parent, so a phase of
// an unsampled request records nothing); with any other tracer it goes through the SDK
// (RecordWith). attrs is kept by the span: pass a slice nobody changes afterwards.
func RecordEnded(ctx context.Context, tr trace.Tracer, name string, p Phase, attrs []attribute.KeyValue) {
	t, ok := tr.(*Tracer)
	if !ok {
		RecordWith(ctx, tr, name, p, trace.WithAttributes(attrs...))
		return
	}
	s := t.start(ctx, name, trace.SpanKindInternal, p.Start, attrs)
	s.End(p.End, codes.Unset, "")
}

// newSpanID and newTraceID are random non-zero IDs, as the SDK's default ID generator makes
// them.
func newSpanID() trace.SpanID {
	var id trace.SpanID
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

func newTraceID() trace.TraceID {
	var id trace.TraceID
	for !id.IsValid() {
		binary.NativeEndian.PutUint64(id[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(id[8:], rand.Uint64())
	}
	return id
}
