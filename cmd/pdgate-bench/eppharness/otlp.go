package eppharness

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

// OTLPReceiver is a real OTLP/gRPC trace endpoint (the collector's TraceService) that counts
// the spans it is sent and keeps nothing: what a traced EPP exports to while the bench meters
// it. Its own CPU is the bench's, not the EPP's.
type OTLPReceiver struct {
	// The generated TraceService interface requires the embed (forward compatibility with
	// methods a newer proto adds); Export, the only RPC, is implemented below.
	coltrace.UnimplementedTraceServiceServer
	// Addr is host:port of the gRPC listener (plaintext).
	Addr  string
	spans atomic.Int64
	srv   *grpc.Server
}

// StartOTLPReceiver listens on a free loopback port.
func StartOTLPReceiver() (*OTLPReceiver, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("otlp receiver: %w", err)
	}
	r := &OTLPReceiver{Addr: l.Addr().String(), srv: grpc.NewServer()}
	coltrace.RegisterTraceServiceServer(r.srv, r)
	go func() { _ = r.srv.Serve(l) }()
	return r, nil
}

// Export counts the request's spans.
func (r *OTLPReceiver) Export(_ context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	n := 0
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			n += len(ss.GetSpans())
		}
	}
	r.spans.Add(int64(n))
	return &coltrace.ExportTraceServiceResponse{}, nil
}

// Spans is the number of spans received so far.
func (r *OTLPReceiver) Spans() int64 { return r.spans.Load() }

// Close stops the server.
func (r *OTLPReceiver) Close() { r.srv.Stop() }

// otlpEnv points an EPP's OpenTelemetry SDK at endpoint (host:port, plaintext). A ratio of 0
// or 1 samples every request: the worst case, what a gateway that samples everything asks of
// the EPP; below 1 the SDK's parent-based trace-ID ratio sampler samples that fraction of the
// bench's requests (they carry no traceparent). The batch processor keeps its default batch
// size (512) but exports every ExportDelay instead of every 5 s, so that the wait for a
// phase's last export (ExportQuiet) adds little idle time to the phase; at the bench's rates a
// batch still holds over a hundred spans, and the per-export cost is small beside the spans'.
func otlpEnv(endpoint string, ratio float64) []string {
	env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + endpoint, "OTEL_BSP_SCHEDULE_DELAY=" + strconv.Itoa(int(ExportDelay/time.Millisecond))}
	if ratio <= 0 || ratio >= 1 {
		return append(env, "OTEL_TRACES_SAMPLER=parentbased_always_on")
	}
	return append(env, "OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG="+strconv.FormatFloat(ratio, 'g', -1, 64))
}

// ExportDelay is the traced EPP's batch export interval; ExportQuiet, longer, is how long a
// receiver must get nothing before every span made so far counts as exported.
const (
	ExportDelay = time.Second
	ExportQuiet = 1500 * time.Millisecond
)
