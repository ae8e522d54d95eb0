package telemetry

import (
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// origin is a Tracer's resource and instrumentation scope in OTLP form, converted once: the
// SDK's exporter converts them again for every batch.
type origin struct {
	res       *resourcepb.Resource
	resSchema string
	scope     *commonpb.InstrumentationScope
	scopeURL  string
}

func newOrigin(res *resource.Resource, scope instrumentation.Scope) *origin {
	o := &origin{scopeURL: scope.SchemaURL}
	if res != nil {
		o.res = &resourcepb.Resource{Attributes: iterKeyValues(res.Iter())}
		o.resSchema = res.SchemaURL()
	}
	if scope != (instrumentation.Scope{}) {
		o.scope = &commonpb.InstrumentationScope{Name: scope.Name, Version: scope.Version,
			Attributes: iterKeyValues(scope.Attributes.Iter())}
	}
	return o
}

func iterKeyValues(it attribute.Iterator) []*commonpb.KeyValue {
	var out []*commonpb.KeyValue
	for it.Next() {
		kv := it.Attribute()
		out = append(out, &commonpb.KeyValue{Key: string(kv.Key), Value: anyValue(kv.Value)})
	}
	return out
}

// otlpBatch converts records to the OTLP messages the exporter's client uploads, with the same
// fields the SDK's exporter writes for the same span. It is owned by the export goroutine and
// keeps its messages' memory from one batch to the next: the client marshals a batch before
// its upload returns, so a steady flow of spans allocates nothing here. Between batches the
// messages are zeroed (release): left filled, a batch of them is some twenty pointers a span
// (the spans' interior pointers and the strings they hold) that every garbage collection
// cycle of the process follows again until the next batch, and the EPP's request path at
// 16 KB runs about twice as many cycles a request as at 1 KB. Zeroed, they still cost each
// cycle about 0.38 M instructions (300 spans; BenchmarkRetainedByExport); building them for
// each batch instead allocates about 2.8 KB a traced request, which in the EPP's 400-request
// instruction-count phases (llm-d P/D, 1 KB) brought a fourth collection cycle (40 M) into
// every traced phase measured, where kept messages left it at three.
type otlpBatch struct {
	spans    []tracepb.Span
	spanPtrs []*tracepb.Span
	status   []tracepb.Status
	ids      []byte
	kvs      []commonpb.KeyValue
	kvPtrs   []*commonpb.KeyValue
	vals     []commonpb.AnyValue
	strs     []commonpb.AnyValue_StringValue
	ints     []commonpb.AnyValue_IntValue
	scopes   []tracepb.ScopeSpans
	rs       []tracepb.ResourceSpans
	rsPtrs   []*tracepb.ResourceSpans
	origins  []*origin
}

// grow returns s with room for n elements, reusing its memory when it has the room; the old
// messages are not copied (they are rebuilt, and a message must not be copied). It at least
// doubles, so that batches of growing size do not allocate each time.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n, max(n, 2*cap(s), 64))
	}
	return s[:n]
}

// build converts recs, grouped by origin in the order origins first appear. The result is
// valid until the next build.
func (o *otlpBatch) build(recs []record) []*tracepb.ResourceSpans {
	nAttrs := 0
	o.origins = o.origins[:0]
	for i := range recs {
		nAttrs += len(recs[i].attrs)
		if !slices.Contains(o.origins, recs[i].origin) {
			o.origins = append(o.origins, recs[i].origin)
		}
	}
	o.spans, o.spanPtrs, o.status = grow(o.spans, len(recs)), grow(o.spanPtrs, len(recs)), grow(o.status, len(recs))
	o.ids = grow(o.ids, len(recs)*32)
	o.kvs, o.kvPtrs, o.vals = grow(o.kvs, nAttrs), grow(o.kvPtrs, nAttrs), grow(o.vals, nAttrs)
	o.strs, o.ints = grow(o.strs, nAttrs), grow(o.ints, nAttrs)
	nkv := 0
	for i := range recs {
		r := &recs[i]
		ids := o.ids[i*32 : i*32+32 : i*32+32]
		tid, sid := r.sc.TraceID(), r.sc.SpanID()
		copy(ids[:16], tid[:])
		copy(ids[16:24], sid[:])
		o.status[i] = tracepb.Status{Code: statusCode(r.status), Message: r.statusDesc}
		flags := uint32(r.sc.TraceFlags()) | uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK)
		if r.parentRemote {
			flags |= uint32(tracepb.SpanFlags_SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK)
		}
		// trace.SpanKind and OTLP's SpanKind number the kinds alike (unspecified 0 ... consumer 5).
		o.spans[i] = tracepb.Span{TraceId: ids[:16], SpanId: ids[16:24],
			Status: &o.status[i], StartTimeUnixNano: unixNano(r.start), EndTimeUnixNano: unixNano(r.end),
			Kind: tracepb.Span_SpanKind(r.kind), Name: r.name, Flags: flags}
		if ts := r.sc.TraceState(); ts.Len() > 0 {
			o.spans[i].TraceState = ts.String()
		}
		if r.parent.IsValid() {
			copy(ids[24:], r.parent[:])
			o.spans[i].ParentSpanId = ids[24:]
		}
		if len(r.attrs) > 0 {
			kvs := o.kvPtrs[nkv : nkv+len(r.attrs) : nkv+len(r.attrs)]
			for j, a := range r.attrs {
				o.kvs[nkv] = commonpb.KeyValue{Key: string(a.Key), Value: o.value(nkv, a.Value)}
				kvs[j] = &o.kvs[nkv]
				nkv++
			}
			o.spans[i].Attributes = kvs
		}
		o.spanPtrs[i] = &o.spans[i]
	}
	o.scopes, o.rs, o.rsPtrs = grow(o.scopes, len(o.origins)), grow(o.rs, len(o.origins)), grow(o.rsPtrs, len(o.origins))
	if len(o.origins) == 1 {
		// The EPP's case: one tracer, every span in one slice, in queue order.
		o.fill(0, o.origins[0], o.spanPtrs)
		return o.rsPtrs
	}
	for k, org := range o.origins {
		var spans []*tracepb.Span // several tracers in one process: rare enough to allocate
		for i := range recs {
			if recs[i].origin == org {
				spans = append(spans, o.spanPtrs[i])
			}
		}
		o.fill(k, org, spans)
	}
	return o.rsPtrs
}

// release zeroes the messages of the last batch, keeping their memory: nothing they pointed to
// stays reachable from them, and a collection cycle only walks the cleared slots.
func (o *otlpBatch) release() {
	clear(o.spans)
	clear(o.spanPtrs)
	clear(o.status)
	clear(o.kvs)
	clear(o.kvPtrs)
	clear(o.vals)
	clear(o.strs)
	clear(o.ints)
	clear(o.scopes)
	clear(o.rs)
	clear(o.rsPtrs)
	clear(o.origins)
}

func (o *otlpBatch) fill(k int, org *origin, spans []*tracepb.Span) {
	o.scopes[k] = tracepb.ScopeSpans{Scope: org.scope, Spans: spans, SchemaUrl: org.scopeURL}
	o.rs[k] = tracepb.ResourceSpans{Resource: org.res, ScopeSpans: []*tracepb.ScopeSpans{&o.scopes[k]}, SchemaUrl: org.resSchema}
	o.rsPtrs[k] = &o.rs[k]
}

// value is v as OTLP, in the i-th slot of the batch's value messages; strings and integers
// (what pdgate's spans carry) reuse their wrappers, other types allocate as the exporter does.
func (o *otlpBatch) value(i int, v attribute.Value) *commonpb.AnyValue {
	av := &o.vals[i]
	switch v.Type() {
	case attribute.STRING:
		o.strs[i] = commonpb.AnyValue_StringValue{StringValue: v.AsString()}
		*av = commonpb.AnyValue{Value: &o.strs[i]}
	case attribute.INT64:
		o.ints[i] = commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}
		*av = commonpb.AnyValue{Value: &o.ints[i]}
	default:
		*av = commonpb.AnyValue{}
		av.Value = anyValue(v).Value
	}
	return av
}

// anyValue converts any attribute value as the SDK's exporter does.
func anyValue(v attribute.Value) *commonpb.AnyValue {
	av := &commonpb.AnyValue{}
	switch v.Type() {
	case attribute.BOOL:
		av.Value = &commonpb.AnyValue_BoolValue{BoolValue: v.AsBool()}
	case attribute.INT64:
		av.Value = &commonpb.AnyValue_IntValue{IntValue: v.AsInt64()}
	case attribute.FLOAT64:
		av.Value = &commonpb.AnyValue_DoubleValue{DoubleValue: v.AsFloat64()}
	case attribute.STRING:
		av.Value = &commonpb.AnyValue_StringValue{StringValue: v.AsString()}
	case attribute.BOOLSLICE:
		av.Value = arrayValue(v.AsBoolSlice(), attribute.BoolValue)
	case attribute.INT64SLICE:
		av.Value = arrayValue(v.AsInt64Slice(), attribute.Int64Value)
	case attribute.FLOAT64SLICE:
		av.Value = arrayValue(v.AsFloat64Slice(), attribute.Float64Value)
	case attribute.STRINGSLICE:
		av.Value = arrayValue(v.AsStringSlice(), attribute.StringValue)
	case attribute.EMPTY:
	default:
		av.Value = &commonpb.AnyValue_StringValue{StringValue: "INVALID"}
	}
	return av
}

func arrayValue[T any](vs []T, conv func(T) attribute.Value) *commonpb.AnyValue_ArrayValue {
	out := make([]*commonpb.AnyValue, len(vs))
	for i, v := range vs {
		out[i] = anyValue(conv(v))
	}
	return &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{Values: out}}
}

func statusCode(c codes.Code) tracepb.Status_StatusCode {
	switch c {
	case codes.Ok:
		return tracepb.Status_STATUS_CODE_OK
	case codes.Error:
		return tracepb.Status_STATUS_CODE_ERROR
	}
	return tracepb.Status_STATUS_CODE_UNSET
}

// unixNano is t in OTLP's unsigned nanoseconds, 0 before the epoch, as the exporter writes it.
func unixNano(t time.Time) uint64 {
	return uint64(max(0, t.UnixNano())) //nolint:gosec // negative values are clamped to 0
}
