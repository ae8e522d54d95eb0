// Package otlpreceiver is a real OTLP/gRPC trace endpoint (the OpenTelemetry collector's
// TraceService) for pdgate's own tools: what the lab (`pdgate lab --otlp`), the EPP bench and
// the tracing e2e tests point pdgate's processes at with OTEL_EXPORTER_OTLP_ENDPOINT. A real
// endpoint, not an in-process exporter, so that what is checked is what the binaries send over
// the wire.
package otlpreceiver

import (
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/grpc"
)

// Span is one span as the receiver got it, flattened: its resource's service.name, hex ids
// ("" for no parent) and the span's attributes as strings.
type Span struct {
	Service string            `json:"service"`
	TraceID string            `json:"traceId"`
	SpanID  string            `json:"spanId"`
	Parent  string            `json:"parentSpanId,omitempty"`
	Name    string            `json:"name"`
	Start   time.Time         `json:"start"`
	End     time.Time         `json:"end"`
	Attrs   map[string]string `json:"attributes,omitempty"`
}

// Duration is the span's length.
func (s Span) Duration() time.Duration { return s.End.Sub(s.Start) }

// Options configures a Receiver.
type Options struct {
	// Addr is the listen address (host:port); "" picks a free loopback port.
	Addr string
	// Keep holds every span in memory for Spans and Trace (tests; a lab run writes them out
	// through OnSpans instead).
	Keep bool
	// OnSpans gets each export's spans, on the gRPC handler's goroutine (exports may arrive
	// concurrently). With neither Keep nor OnSpans the receiver only counts, so that a
	// benchmark metering the exporting process spends little of its own CPU on spans.
	OnSpans func([]Span)
}

// Receiver serves the TraceService until Close.
type Receiver struct {
	// The generated TraceService interface requires the embed (forward compatibility with
	// methods a newer proto adds); Export, the only RPC, is implemented below.
	coltrace.UnimplementedTraceServiceServer
	// Addr is host:port of the gRPC listener (plaintext).
	Addr  string
	o     Options
	count atomic.Int64
	srv   *grpc.Server
	mu    sync.Mutex
	kept  []Span
}

// Start listens and serves.
func Start(o Options) (*Receiver, error) {
	addr := o.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("otlp receiver: %w", err)
	}
	r := &Receiver{Addr: l.Addr().String(), o: o, srv: grpc.NewServer()}
	coltrace.RegisterTraceServiceServer(r.srv, r)
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

// Endpoint is the receiver as OTEL_EXPORTER_OTLP_ENDPOINT names it (http:// = plaintext).
func (r *Receiver) Endpoint() string { return "http://" + r.Addr }

// Export takes one batch of spans.
func (r *Receiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	if !r.o.Keep && r.o.OnSpans == nil {
		n := 0
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				n += len(ss.GetSpans())
			}
		}
		r.count.Add(int64(n))
		return &coltrace.ExportTraceServiceResponse{}, nil
	}
	got := flatten(req)
	r.count.Add(int64(len(got)))
	if r.o.Keep {
		r.mu.Lock()
		r.kept = append(r.kept, got...)
		r.mu.Unlock()
	}
	if r.o.OnSpans != nil {
		r.o.OnSpans(got)
	}
	return &coltrace.ExportTraceServiceResponse{}, nil
}

func flatten(req *coltrace.ExportTraceServiceRequest) []Span {
	var out []Span
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := Span{Service: service, TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					Parent: hex.EncodeToString(sp.GetParentSpanId()), Name: sp.GetName(),
					Start: time.Unix(0, int64(sp.GetStartTimeUnixNano())), End: time.Unix(0, int64(sp.GetEndTimeUnixNano()))}
				if len(sp.GetAttributes()) > 0 {
					s.Attrs = make(map[string]string, len(sp.GetAttributes()))
				}
				for _, kv := range sp.GetAttributes() {
					s.Attrs[kv.GetKey()] = valueString(kv.GetValue())
				}
				out = append(out, s)
			}
		}
	}
	return out
}

// valueString renders an attribute value; pdgate's attributes are strings, booleans and
// numbers (status codes, token counts), and those read back as they were written.
func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue)
	}
	return v.String()
}

// Count is the number of spans received so far.
func (r *Receiver) Count() int64 { return r.count.Load() }

// Spans returns a copy of the spans kept so far (Options.Keep).
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.kept...)
}

// Trace returns the kept spans of the trace that holds a span named name whose attribute
// key is value (the last such trace), or nil.
func (r *Receiver) Trace(name, key, value string) []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	traceID := ""
	for _, s := range r.kept {
		if s.Name == name && s.Attrs[key] == value {
			traceID = s.TraceID
		}
	}
	if traceID == "" {
		return nil
	}
	var out []Span
	for _, s := range r.kept {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Close stops the server; exports in flight are cut off.
func (r *Receiver) Close() { r.srv.Stop() }
