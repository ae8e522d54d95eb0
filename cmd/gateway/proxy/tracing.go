package proxy

import (
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdgate/pdgate/cmd/internal/telemetry"
)

// Span names and the gateway's phase (the pdgate.phase attribute, as the EPP's and the
// sidecar's phases carry it).
const (
	SpanRequest  = "pdgate.gateway.request"
	SpanResponse = "pdgate.gateway.response"
	// PhaseResponse runs from the upstream's response headers to the first body bytes written
	// to the client: the EPP's response-headers round trip (Envoy's, in production).
	PhaseResponse = "gateway_response"
)

// exchangeTrace is one request's gateway span; the zero value is tracing off.
type exchangeTrace struct {
	span       trace.Span
	upstreamAt time.Time // the upstream's response headers arrived
	firstWrite time.Time
}

// startTrace opens the gateway's span as a child of the client's traceparent, or as a new
// trace's root when the client sent none, and hands its traceparent to the EPP (which
// replaces it with its own for the upstream) and, failing that, to the upstream.
func (g *Gateway) startTrace(x *exchange, start time.Time) {
	tr := g.opts.Tracer
	if tr == nil {
		return
	}
	parent := telemetry.Extract(x.r.Context(), x.r.Header.Get)
	ctx, span := tr.Start(parent, SpanRequest, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String("http.request.method", x.r.Method), attribute.String("url.path", x.r.URL.Path),
			attribute.String("pdgate.request_id", x.reqHead.get("X-Request-Id"))))
	x.trace.span = span
	telemetry.Inject(ctx, x.reqHead.h.Set)
}

// upstreamAnswered marks the upstream's response headers; firstBytes the first body bytes
// written to the client.
func (x *exchange) upstreamAnswered() {
	if x.trace.span != nil {
		x.trace.upstreamAt = time.Now()
	}
}

func (x *exchange) firstBytes() {
	if x.trace.span != nil && x.trace.firstWrite.IsZero() {
		x.trace.firstWrite = time.Now()
	}
}

// endTrace records the response phase and ends the gateway's span.
func (x *exchange) endTrace(tr trace.Tracer) {
	t := &x.trace
	if t.span == nil {
		return
	}
	if !t.upstreamAt.IsZero() && !t.firstWrite.IsZero() {
		ctx := trace.ContextWithSpan(x.r.Context(), t.span)
		telemetry.Record(ctx, tr, SpanResponse, telemetry.Phase{Name: PhaseResponse, Start: t.upstreamAt, End: t.firstWrite},
			attribute.String("pdgate.phase", PhaseResponse))
	}
	t.span.SetAttributes(attribute.Int("http.response.status_code", x.status))
	if x.status >= http.StatusInternalServerError {
		t.span.SetStatus(codes.Error, strconv.Itoa(x.status))
	}
	t.span.End()
}
