package otel

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// span is one span as an OTLP receiver got it.
type span struct {
	service                 string
	traceID, spanID, parent string
	name                    string
	start, end              time.Time
	attrs                   map[string]string
}

func (s span) dur() time.Duration { return s.end.Sub(s.start) }

// receiver is a real OTLP/gRPC trace endpoint (the collector's TraceService), keeping every
// span it is sent.
type receiver struct {
	coltrace.UnimplementedTraceServiceServer
	addr  string
	mu    sync.Mutex
	spans []span
}

func startReceiver(t *testing.T) *receiver {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &receiver{addr: l.Addr().String()}
	srv := grpc.NewServer()
	coltrace.RegisterTraceServiceServer(srv, r)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)
	return r
}

func (r *receiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	var got []span
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := span{service: service, traceID: hexID(sp.GetTraceId()), spanID: hexID(sp.GetSpanId()),
					parent: hexID(sp.GetParentSpanId()), name: sp.GetName(),
					start: time.Unix(0, int64(sp.GetStartTimeUnixNano())), end: time.Unix(0, int64(sp.GetEndTimeUnixNano())),
					attrs: map[string]string{}}
				for _, kv := range sp.GetAttributes() {
					s.attrs[kv.GetKey()] = kv.GetValue().GetStringValue()
				}
				got = append(got, s)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// trace returns the spans of the trace whose gateway span carries request id id.
func (r *receiver) trace(id string) []span {
	r.mu.Lock()
	defer r.mu.Unlock()
	traceID := ""
	for _, s := range r.spans {
		if s.name == spanGateway && s.attrs["pdgate.request_id"] == id {
			traceID = s.traceID
		}
	}
	if traceID == "" {
		return nil
	}
	var out []span
	for _, s := range r.spans {
		if s.traceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

func hexID(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}
