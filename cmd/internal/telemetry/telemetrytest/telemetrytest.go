// Package telemetrytest records the spans a tracer ends, in memory, for the tests of the
// binaries that trace (cmd/epp/extproc, cmd/sidecar/proxy, cmd/gateway/proxy).
package telemetrytest

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// ClientTraceparent is a client's W3C traceparent: trace ClientTraceID, parent ClientSpanID.
const (
	ClientTraceparent = "00-" + ClientTraceID + "-" + ClientSpanID + "-01"
	ClientTraceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
	ClientSpanID      = "00f067aa0ba902b7"
)

// Recorder is a tracer whose ended spans can be read back.
type Recorder struct {
	Tracer trace.Tracer
	rec    *tracetest.SpanRecorder
}

// New returns a recording tracer (the SDK's, sampling everything).
func New() *Recorder {
	rec := tracetest.NewSpanRecorder()
	return &Recorder{Tracer: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test"), rec: rec}
}

// Processor is the span processor behind Tracer, which records what it is handed.
func (r *Recorder) Processor() sdktrace.SpanProcessor { return r.rec }

// Ended returns the ended spans by name (the last of a name wins).
func (r *Recorder) Ended() map[string]sdktrace.ReadOnlySpan {
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range r.rec.Ended() {
		out[s.Name()] = s
	}
	return out
}

// SpanContext parses a traceparent value.
func SpanContext(traceparent string) trace.SpanContext {
	// The propagator directly, not cmd/internal/telemetry: hack/pluginimports counts every
	// package under an internal/ folder as a library, and a library imports nothing under cmd/.
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": traceparent})
	return trace.SpanContextFromContext(ctx)
}
