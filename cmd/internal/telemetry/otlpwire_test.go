package telemetry

import (
	"bytes"
	"math"
	"runtime"
	"slices"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func str(s string) *commonpb.AnyValue {
	return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: s}}
}

func kv(k string, v *commonpb.AnyValue) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: v}
}

// fullRequest sets every field the encoder writes, with values that need multi-byte varints,
// zero and negative numbers, empty strings, and every kind of attribute value, nested.
func fullRequest() *coltracepb.ExportTraceServiceRequest {
	attrs := []*commonpb.KeyValue{
		kv("s", str("value")), kv("empty", str("")), kv("", str("no key")),
		kv("t", &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{BoolValue: true}}),
		kv("f", &commonpb.AnyValue{Value: &commonpb.AnyValue_BoolValue{}}),
		kv("i", &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: -3}}),
		kv("z", &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{}}),
		kv("big", &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 1 << 40}}),
		kv("d", &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: 0.25}}),
		kv("b", &commonpb.AnyValue{Value: &commonpb.AnyValue_BytesValue{BytesValue: []byte{0, 1, 2}}}),
		kv("a", &commonpb.AnyValue{Value: &commonpb.AnyValue_ArrayValue{ArrayValue: &commonpb.ArrayValue{
			Values: []*commonpb.AnyValue{str("x"), {Value: &commonpb.AnyValue_IntValue{IntValue: 7}}, {}}}}}),
		kv("kv", &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{KvlistValue: &commonpb.KeyValueList{
			Values: []*commonpb.KeyValue{kv("n", str("nested")), {Key: "nil value"}}}}}),
		kv("unset", &commonpb.AnyValue{}), {Key: "no value"},
	}
	long := bytes.Repeat([]byte("n"), 300) // a length that takes two varint bytes
	span := &tracepb.Span{TraceId: bytes.Repeat([]byte{0xab}, 16), SpanId: bytes.Repeat([]byte{0xcd}, 8),
		TraceState: "vendor=x", ParentSpanId: bytes.Repeat([]byte{0xef}, 8), Flags: 0x301, Name: string(long),
		Kind: tracepb.Span_SPAN_KIND_SERVER, StartTimeUnixNano: 1700000000123456789, EndTimeUnixNano: 1700000000223456789,
		Attributes: attrs, DroppedAttributesCount: 2,
		Events:             []*tracepb.Span_Event{{TimeUnixNano: 5, Name: "e", Attributes: attrs[:3], DroppedAttributesCount: 1}, {}},
		DroppedEventsCount: 3,
		Links: []*tracepb.Span_Link{{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), TraceState: "a=b",
			Attributes: attrs[3:6], DroppedAttributesCount: 4, Flags: 0x100}, {}},
		DroppedLinksCount: 5,
		Status:            &tracepb.Status{Message: "NotFound", Code: tracepb.Status_STATUS_CODE_ERROR}}
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{Resource: &resourcepb.Resource{Attributes: attrs[:2], DroppedAttributesCount: 6}, SchemaUrl: "https://s/1",
			ScopeSpans: []*tracepb.ScopeSpans{
				{Scope: &commonpb.InstrumentationScope{Name: "scope", Version: "v1", Attributes: attrs[5:7], DroppedAttributesCount: 7},
					Spans: []*tracepb.Span{span, {}, {Status: &tracepb.Status{}}}, SchemaUrl: "https://s/2"},
				{},
			}},
		{},
	}}
}

// The codec writes the standard protobuf codec's bytes for every field of an export request,
// and leaves what it does not write (other signals' dictionary fields) to that codec.
func TestExportCodecMatchesProto(t *testing.T) {
	strindex := fullRequest()
	strindex.ResourceSpans[0].ScopeSpans[0].Spans[0].Attributes[0].KeyStrindex = 3
	strValue := fullRequest()
	strValue.ResourceSpans[0].ScopeSpans[0].Spans[0].Attributes[10].Value.GetArrayValue().Values[2].Value = &commonpb.AnyValue_StringValueStrindex{StringValueStrindex: 2}
	entity := fullRequest()
	entity.ResourceSpans[0].Resource.EntityRefs = []*commonpb.EntityRef{{Type: "k8s.pod"}}
	for name, req := range map[string]*coltracepb.ExportTraceServiceRequest{
		"every field": fullRequest(), "empty": {}, "key string index": strindex, "string index value": strValue, "entity refs": entity,
	} {
		t.Run(name, func(t *testing.T) {
			want, err := proto.Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			got, err := newExportCodec().Marshal(req)
			if err != nil {
				t.Fatal(err)
			}
			if b := got.Materialize(); !bytes.Equal(b, want) {
				t.Fatalf("encoded %d bytes, the standard codec %d:\n%x\n%x", len(b), len(want), b, want)
			}
			got.Free()
		})
	}
	if !encodable(fullRequest()) {
		t.Fatal("the full request went to the standard codec, not through the encoder")
	}
}

// The codec encodes into a buffer it keeps across garbage collection cycles and sized to the
// request: gRPC's default pool rounds a batch up to 1 MB and loses it at every cycle.
func TestExportCodecKeepsItsBuffer(t *testing.T) {
	req := &coltracepb.ExportTraceServiceRequest{ResourceSpans: fullRequest().ResourceSpans}
	for range 7 { // about 300 spans' worth: the EPP's batches at a few hundred requests a second
		req.ResourceSpans = append(req.ResourceSpans, req.ResourceSpans...)
	}
	c := newExportCodec()
	first, err := c.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	size := first.Len()
	if b := first.Materialize(); cap(b) < size {
		t.Fatalf("materialized %d of %d bytes", cap(b), size)
	}
	first.Free()
	// TotalAlloc counts every goroutine's allocations, the runtime's and other tests' included,
	// so the least of three tries is the encoder's: a buffer not kept costs the whole request
	// in every one of them.
	least := uint64(math.MaxUint64)
	for range 3 {
		runtime.GC() // twice: a sync.Pool keeps its objects through one cycle
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		again, err := c.Marshal(req)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		if again.Len() != size {
			t.Fatalf("encoded %d bytes, then %d", size, again.Len())
		}
		again.Free()
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	if least > uint64(size)/4 {
		t.Fatalf("encoding a %d-byte request again after two collection cycles allocated %d bytes at the least of 3 tries; want the kept buffer reused", size, least)
	}
}

// The encoder knows every field of the messages it writes: a field a new OTLP version adds
// fails here until it is encoded or sent to the standard codec (encodable).
func TestExportCodecCoversEveryField(t *testing.T) {
	for _, c := range []struct {
		msg    proto.Message
		fields []protoreflect.FieldNumber
	}{
		{&coltracepb.ExportTraceServiceRequest{}, []protoreflect.FieldNumber{1}},
		{&tracepb.ResourceSpans{}, []protoreflect.FieldNumber{1, 2, 3}},
		{&resourcepb.Resource{}, []protoreflect.FieldNumber{1, 2, 3}}, // 3, entity refs: standard codec
		{&tracepb.ScopeSpans{}, []protoreflect.FieldNumber{1, 2, 3}},
		{&commonpb.InstrumentationScope{}, []protoreflect.FieldNumber{1, 2, 3, 4}},
		{&tracepb.Span{}, []protoreflect.FieldNumber{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}},
		{&tracepb.Span_Event{}, []protoreflect.FieldNumber{1, 2, 3, 4}},
		{&tracepb.Span_Link{}, []protoreflect.FieldNumber{1, 2, 3, 4, 5, 6}},
		{&tracepb.Status{}, []protoreflect.FieldNumber{2, 3}},
		{&commonpb.KeyValue{}, []protoreflect.FieldNumber{1, 2, 3}},                // 3, key string index: standard codec
		{&commonpb.AnyValue{}, []protoreflect.FieldNumber{1, 2, 3, 4, 5, 6, 7, 8}}, // 8, string index: standard codec
		{&commonpb.ArrayValue{}, []protoreflect.FieldNumber{1}},
		{&commonpb.KeyValueList{}, []protoreflect.FieldNumber{1}},
	} {
		fs := c.msg.ProtoReflect().Descriptor().Fields()
		var got []protoreflect.FieldNumber
		for i := range fs.Len() {
			got = append(got, fs.Get(i).Number())
		}
		slices.Sort(got)
		if !slices.Equal(got, c.fields) {
			t.Errorf("%s has fields %v, the encoder knows %v", c.msg.ProtoReflect().Descriptor().FullName(), got, c.fields)
		}
	}
}
