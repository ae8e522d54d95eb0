package telemetry

import (
	"fmt"
	"math"
	"sync"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
)

// exportCodec is the gRPC codec of the trace exporter's connection. It writes an
// ExportTraceServiceRequest's protobuf encoding directly, field by field, where the generic
// protobuf marshaller walks each message through its reflection tables (and validates every
// string as UTF-8 again): under callgrind that was the largest cost of a traced EPP request
// left once pdgate built the OTLP messages itself, about 6,000 instructions a span against
// about 1,000 here. Any other message, and a request using a field the encoder does not write
// (fields of other signals that the trace exporters never set), goes through the standard
// codec; responses are decoded by it. The bytes are the standard codec's
// (TestExportCodecMatchesProto).
type exportCodec struct {
	std  encoding.CodecV2
	bufs *exportBuffers
}

// exporterDialOptions are the dial options of pdgate's OTLP gRPC client. otlptracegrpc's
// WithDialOption replaces its default user agent, which is therefore set again.
func exporterDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithUserAgent("OTel OTLP Exporter Go/" + otlptrace.Version()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(newExportCodec()))}
}

func newExportCodec() exportCodec {
	return exportCodec{std: encoding.GetCodecV2("proto"), bufs: &exportBuffers{}}
}

// exportBuffers lends gRPC the buffer an export request is encoded into, and takes it back
// once the request is written. gRPC's default pool would round a 40-150 KB batch up to its
// 1 MB size class and keep it in a sync.Pool, which every garbage collection cycle empties:
// an EPP that collects more than once between two exports (every 16 KB request makes twice
// the garbage of a 1 KB one) then allocated and zeroed 1 MB per export, garbage that brought
// the next cycle forward. These buffers are kept across cycles (bytes hold no pointers, so
// the collector does not walk them), at most two: the one being written and the next.
type exportBuffers struct {
	mu   sync.Mutex
	free []*[]byte
}

// Get returns a buffer of length n, reusing a kept one that is large enough.
func (p *exportBuffers) Get(n int) *[]byte {
	p.mu.Lock()
	for i, b := range p.free {
		if cap(*b) >= n {
			p.free[i] = p.free[len(p.free)-1]
			p.free[len(p.free)-1] = nil
			p.free = p.free[:len(p.free)-1]
			p.mu.Unlock()
			*b = (*b)[:n]
			return b
		}
	}
	p.mu.Unlock()
	b := make([]byte, n, n+n/4) // room for a somewhat larger next batch
	return &b
}

// Put keeps b for a later export, unless two are kept already (the smaller one goes).
func (p *exportBuffers) Put(b *[]byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.free) < 2 {
		p.free = append(p.free, b)
		return
	}
	for i, k := range p.free {
		if cap(*k) < cap(*b) {
			p.free[i] = b
			return
		}
	}
}

// Name is the standard codec's: the content subtype on the wire stays "proto".
func (exportCodec) Name() string { return "proto" }

func (c exportCodec) Unmarshal(data mem.BufferSlice, v any) error { return c.std.Unmarshal(data, v) }

func (c exportCodec) Marshal(v any) (mem.BufferSlice, error) {
	req, ok := v.(*coltracepb.ExportTraceServiceRequest)
	if !ok || !encodable(req) {
		return c.std.Marshal(v)
	}
	e := encoders.Get().(*wireEncoder)
	defer encoders.Put(e)
	size := e.sizeRequest(req)
	pool := c.bufs
	buf := pool.Get(size)
	b := e.appendRequest((*buf)[:0], req)
	if len(b) != size {
		pool.Put(buf)
		return nil, fmt.Errorf("encoding an OTLP export request: wrote %d bytes, sized %d", len(b), size)
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

var encoders = sync.Pool{New: func() any { return &wireEncoder{} }}

// wireEncoder keeps, between its sizing pass and its writing pass over a request, the sizes
// of the resource spans, scope spans and spans in the order both passes visit them: every
// nested message is written after its length, and sizing each again at each level above it
// cost more than the writing.
type wireEncoder struct {
	sizes []int
	next  int
}

// reserve holds the place of the size of the message the sizing pass visits now.
func (e *wireEncoder) reserve() int {
	e.sizes = append(e.sizes, 0)
	return len(e.sizes) - 1
}

// take is the size of the message visited now by the writing pass.
func (e *wireEncoder) take() int {
	n := e.sizes[e.next]
	e.next++
	return n
}

func (e *wireEncoder) sizeRequest(req *coltracepb.ExportTraceServiceRequest) int {
	e.sizes, e.next = e.sizes[:0], 0
	n := 0
	for _, rs := range req.ResourceSpans {
		n += sizeField(1, e.sizeResourceSpans(rs))
	}
	return n
}

func (e *wireEncoder) appendRequest(b []byte, req *coltracepb.ExportTraceServiceRequest) []byte {
	for _, rs := range req.ResourceSpans {
		b = appendMsg(b, 1, e.take())
		b = e.appendResourceSpans(b, rs)
	}
	return b
}

// encodable tells whether the encoder writes every field req sets: the dictionary fields of
// the profiles signal and resource entity references are left to the standard codec.
func encodable(req *coltracepb.ExportTraceServiceRequest) bool {
	kvs := func(l []*commonpb.KeyValue) bool {
		for _, kv := range l {
			if kv.GetKeyStrindex() != 0 || !anyEncodable(kv.GetValue()) {
				return false
			}
		}
		return true
	}
	for _, rs := range req.ResourceSpans {
		if r := rs.GetResource(); len(r.GetEntityRefs()) > 0 || !kvs(r.GetAttributes()) {
			return false
		}
		for _, ss := range rs.GetScopeSpans() {
			if !kvs(ss.GetScope().GetAttributes()) {
				return false
			}
			for _, s := range ss.GetSpans() {
				if !kvs(s.GetAttributes()) {
					return false
				}
				for _, e := range s.GetEvents() {
					if !kvs(e.GetAttributes()) {
						return false
					}
				}
				for _, l := range s.GetLinks() {
					if !kvs(l.GetAttributes()) {
						return false
					}
				}
			}
		}
	}
	return true
}

func anyEncodable(v *commonpb.AnyValue) bool {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValueStrindex:
		return false
	case *commonpb.AnyValue_ArrayValue:
		for _, e := range x.ArrayValue.GetValues() {
			if !anyEncodable(e) {
				return false
			}
		}
	case *commonpb.AnyValue_KvlistValue:
		for _, kv := range x.KvlistValue.GetValues() {
			if kv.GetKeyStrindex() != 0 || !anyEncodable(kv.GetValue()) {
				return false
			}
		}
	}
	return true
}

// The sizes and encodings below follow the OTLP .proto field numbers, written in field-number
// order with proto3's rule that a zero scalar, an empty string or bytes and a nil message are
// left out (a oneof member is written whatever its value), as the standard marshaller does.

func sizeField(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return sizeField(num, len(s))
}

func sizeVarint(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

func sizeFixed64(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + 8
}

func sizeFixed32(num protowire.Number, v uint32) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + 4
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return protowire.AppendString(protowire.AppendTag(b, num, protowire.BytesType), s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	return protowire.AppendBytes(protowire.AppendTag(b, num, protowire.BytesType), v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.VarintType), v)
}

func appendFixed64(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed64(protowire.AppendTag(b, num, protowire.Fixed64Type), v)
}

func appendFixed32(b []byte, num protowire.Number, v uint32) []byte {
	if v == 0 {
		return b
	}
	return protowire.AppendFixed32(protowire.AppendTag(b, num, protowire.Fixed32Type), v)
}

// appendMsg writes a nested message's tag and length; its fields follow.
func appendMsg(b []byte, num protowire.Number, size int) []byte {
	return protowire.AppendVarint(protowire.AppendTag(b, num, protowire.BytesType), uint64(size))
}

func (e *wireEncoder) sizeResourceSpans(rs *tracepb.ResourceSpans) int {
	i := e.reserve()
	n := 0
	if rs.Resource != nil {
		n += sizeField(1, sizeResource(rs.Resource))
	}
	for _, ss := range rs.ScopeSpans {
		n += sizeField(2, e.sizeScopeSpans(ss))
	}
	n += sizeString(3, rs.SchemaUrl)
	e.sizes[i] = n
	return n
}

func (e *wireEncoder) appendResourceSpans(b []byte, rs *tracepb.ResourceSpans) []byte {
	if rs.Resource != nil {
		b = appendMsg(b, 1, sizeResource(rs.Resource))
		b = appendKVs(b, 1, rs.Resource.Attributes)
		b = appendVarint(b, 2, uint64(rs.Resource.DroppedAttributesCount))
	}
	for _, ss := range rs.ScopeSpans {
		b = appendMsg(b, 2, e.take())
		b = e.appendScopeSpans(b, ss)
	}
	return appendString(b, 3, rs.SchemaUrl)
}

func sizeResource(r *resourcepb.Resource) int {
	return sizeKVs(1, r.Attributes) + sizeVarint(2, uint64(r.DroppedAttributesCount))
}

func (e *wireEncoder) sizeScopeSpans(ss *tracepb.ScopeSpans) int {
	i := e.reserve()
	n := 0
	if ss.Scope != nil {
		n += sizeField(1, sizeScope(ss.Scope))
	}
	for _, s := range ss.Spans {
		j := e.reserve()
		e.sizes[j] = sizeSpan(s)
		n += sizeField(2, e.sizes[j])
	}
	n += sizeString(3, ss.SchemaUrl)
	e.sizes[i] = n
	return n
}

func (e *wireEncoder) appendScopeSpans(b []byte, ss *tracepb.ScopeSpans) []byte {
	if sc := ss.Scope; sc != nil {
		b = appendMsg(b, 1, sizeScope(sc))
		b = appendString(b, 1, sc.Name)
		b = appendString(b, 2, sc.Version)
		b = appendKVs(b, 3, sc.Attributes)
		b = appendVarint(b, 4, uint64(sc.DroppedAttributesCount))
	}
	for _, s := range ss.Spans {
		b = appendMsg(b, 2, e.take())
		b = appendSpan(b, s)
	}
	return appendString(b, 3, ss.SchemaUrl)
}

func sizeScope(sc *commonpb.InstrumentationScope) int {
	return sizeString(1, sc.Name) + sizeString(2, sc.Version) + sizeKVs(3, sc.Attributes) +
		sizeVarint(4, uint64(sc.DroppedAttributesCount))
}

func sizeSpan(s *tracepb.Span) int {
	n := sizeString(1, string(s.TraceId)) + sizeString(2, string(s.SpanId)) + sizeString(3, s.TraceState) +
		sizeString(4, string(s.ParentSpanId)) + sizeString(5, s.Name) + sizeVarint(6, uint64(s.Kind)) +
		sizeFixed64(7, s.StartTimeUnixNano) + sizeFixed64(8, s.EndTimeUnixNano) + sizeKVs(9, s.Attributes) +
		sizeVarint(10, uint64(s.DroppedAttributesCount))
	for _, e := range s.Events {
		n += sizeField(11, sizeEvent(e))
	}
	n += sizeVarint(12, uint64(s.DroppedEventsCount))
	for _, l := range s.Links {
		n += sizeField(13, sizeLink(l))
	}
	n += sizeVarint(14, uint64(s.DroppedLinksCount))
	if s.Status != nil {
		n += sizeField(15, sizeStatus(s.Status))
	}
	return n + sizeFixed32(16, s.Flags)
}

func appendSpan(b []byte, s *tracepb.Span) []byte {
	b = appendBytes(b, 1, s.TraceId)
	b = appendBytes(b, 2, s.SpanId)
	b = appendString(b, 3, s.TraceState)
	b = appendBytes(b, 4, s.ParentSpanId)
	b = appendString(b, 5, s.Name)
	b = appendVarint(b, 6, uint64(s.Kind))
	b = appendFixed64(b, 7, s.StartTimeUnixNano)
	b = appendFixed64(b, 8, s.EndTimeUnixNano)
	b = appendKVs(b, 9, s.Attributes)
	b = appendVarint(b, 10, uint64(s.DroppedAttributesCount))
	for _, e := range s.Events {
		b = appendMsg(b, 11, sizeEvent(e))
		b = appendFixed64(b, 1, e.TimeUnixNano)
		b = appendString(b, 2, e.Name)
		b = appendKVs(b, 3, e.Attributes)
		b = appendVarint(b, 4, uint64(e.DroppedAttributesCount))
	}
	b = appendVarint(b, 12, uint64(s.DroppedEventsCount))
	for _, l := range s.Links {
		b = appendMsg(b, 13, sizeLink(l))
		b = appendBytes(b, 1, l.TraceId)
		b = appendBytes(b, 2, l.SpanId)
		b = appendString(b, 3, l.TraceState)
		b = appendKVs(b, 4, l.Attributes)
		b = appendVarint(b, 5, uint64(l.DroppedAttributesCount))
		b = appendFixed32(b, 6, l.Flags)
	}
	b = appendVarint(b, 14, uint64(s.DroppedLinksCount))
	if st := s.Status; st != nil {
		b = appendMsg(b, 15, sizeStatus(st))
		b = appendString(b, 2, st.Message)
		b = appendVarint(b, 3, uint64(st.Code)) //nolint:gosec // enum values are non-negative
	}
	return appendFixed32(b, 16, s.Flags)
}

func sizeEvent(e *tracepb.Span_Event) int {
	return sizeFixed64(1, e.TimeUnixNano) + sizeString(2, e.Name) + sizeKVs(3, e.Attributes) +
		sizeVarint(4, uint64(e.DroppedAttributesCount))
}

func sizeLink(l *tracepb.Span_Link) int {
	return sizeString(1, string(l.TraceId)) + sizeString(2, string(l.SpanId)) + sizeString(3, l.TraceState) +
		sizeKVs(4, l.Attributes) + sizeVarint(5, uint64(l.DroppedAttributesCount)) + sizeFixed32(6, l.Flags)
}

func sizeStatus(st *tracepb.Status) int {
	return sizeString(2, st.Message) + sizeVarint(3, uint64(st.Code)) //nolint:gosec // enum values are non-negative
}

func sizeKVs(num protowire.Number, kvs []*commonpb.KeyValue) int {
	n := 0
	for _, kv := range kvs {
		n += sizeField(num, sizeKV(kv))
	}
	return n
}

func appendKVs(b []byte, num protowire.Number, kvs []*commonpb.KeyValue) []byte {
	for _, kv := range kvs {
		b = appendMsg(b, num, sizeKV(kv))
		b = appendString(b, 1, kv.Key)
		if kv.Value != nil {
			b = appendMsg(b, 2, sizeAny(kv.Value))
			b = appendAny(b, kv.Value)
		}
	}
	return b
}

func sizeKV(kv *commonpb.KeyValue) int {
	n := sizeString(1, kv.Key)
	if kv.Value != nil {
		n += sizeField(2, sizeAny(kv.Value))
	}
	return n
}

func sizeAny(v *commonpb.AnyValue) int {
	switch x := v.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		return sizeField(1, len(x.StringValue))
	case *commonpb.AnyValue_BoolValue:
		return protowire.SizeTag(2) + 1
	case *commonpb.AnyValue_IntValue:
		return protowire.SizeTag(3) + protowire.SizeVarint(uint64(x.IntValue)) //nolint:gosec // int64 is written as its two's complement
	case *commonpb.AnyValue_DoubleValue:
		return protowire.SizeTag(4) + 8
	case *commonpb.AnyValue_ArrayValue:
		return sizeField(5, sizeAnyList(x.ArrayValue.GetValues()))
	case *commonpb.AnyValue_KvlistValue:
		return sizeField(6, sizeKVs(1, x.KvlistValue.GetValues()))
	case *commonpb.AnyValue_BytesValue:
		return sizeField(7, len(x.BytesValue))
	}
	return 0
}

func sizeAnyList(vs []*commonpb.AnyValue) int {
	n := 0
	for _, e := range vs {
		n += sizeField(1, sizeAny(e))
	}
	return n
}

func appendAny(b []byte, v *commonpb.AnyValue) []byte {
	switch x := v.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		return protowire.AppendString(protowire.AppendTag(b, 1, protowire.BytesType), x.StringValue)
	case *commonpb.AnyValue_BoolValue:
		return protowire.AppendVarint(protowire.AppendTag(b, 2, protowire.VarintType), protowire.EncodeBool(x.BoolValue))
	case *commonpb.AnyValue_IntValue:
		return protowire.AppendVarint(protowire.AppendTag(b, 3, protowire.VarintType), uint64(x.IntValue)) //nolint:gosec // two's complement
	case *commonpb.AnyValue_DoubleValue:
		return protowire.AppendFixed64(protowire.AppendTag(b, 4, protowire.Fixed64Type), math.Float64bits(x.DoubleValue))
	case *commonpb.AnyValue_ArrayValue:
		b = appendMsg(b, 5, sizeAnyList(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			b = appendMsg(b, 1, sizeAny(e))
			b = appendAny(b, e)
		}
		return b
	case *commonpb.AnyValue_KvlistValue:
		b = appendMsg(b, 6, sizeKVs(1, x.KvlistValue.GetValues()))
		return appendKVs(b, 1, x.KvlistValue.GetValues())
	case *commonpb.AnyValue_BytesValue:
		return protowire.AppendBytes(protowire.AppendTag(b, 7, protowire.BytesType), x.BytesValue)
	}
	return b
}
