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
	SpanRouting  = "pdgate.gateway.routing"
	SpanForward  = "pdgate.gateway.forward"
	SpanUpstream = "pdgate.gateway.upstream"
	SpanResponse = "pdgate.gateway.response"
	// PhaseResponse runs from the upstream's response headers to the first body bytes written
	// to the client: the EPP's response-headers round trip (Envoy's, in production). It is
	// both one of the request's phases and the last of the gateway's legs.
	PhaseResponse = "gateway_response"
	// The gateway's legs tile its time up to the first byte out, hops between processes
	// included: routing (the request's ext_proc exchange: the EPP's queue and scheduling
	// phases and the gRPC hops around them), forward (building and sending the upstream
	// request), upstream (until the upstream's response headers: the sidecar's phases and the
	// HTTP hops), then the response phase. A leg minus the phases inside it is transit time.
	LegRouting  = "gateway_routing"
	LegForward  = "gateway_forward"
	LegUpstream = "gateway_upstream"
	// AttrLeg names the leg a gateway span times; AttrPhase the request phase.
	AttrLeg   = "pdgate.gateway_leg"
	AttrPhase = "pdgate.phase"
)

// exchangeTrace is one request's gateway span; the zero value is tracing off.
type exchangeTrace struct {
	span       trace.Span
	start      time.Time
	routed     time.Time // the EPP's routing decision arrived
	sent       time.Time // the (last) upstream request was sent
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
	x.trace.span, x.trace.start = span, start
	telemetry.Inject(ctx, x.reqHead.h.Set)
}

// routed marks the EPP's routing decision; sending the upstream request.
func (x *exchange) routed() {
	if x.trace.span != nil {
		x.trace.routed = time.Now()
	}
}

func (x *exchange) sending() {
	if x.trace.span != nil {
		x.trace.sent = time.Now()
	}
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
	ctx := trace.ContextWithSpan(x.r.Context(), t.span)
	for _, l := range []struct {
		span, leg  string
		start, end time.Time
	}{
		{SpanRouting, LegRouting, t.start, t.routed},
		{SpanForward, LegForward, t.routed, t.sent},
		{SpanUpstream, LegUpstream, t.sent, t.upstreamAt},
		{SpanResponse, PhaseResponse, t.upstreamAt, t.firstWrite},
	} {
		if l.start.IsZero() || l.end.IsZero() {
			continue
		}
		attrs := []attribute.KeyValue{attribute.String(AttrLeg, l.leg)}
		if l.leg == PhaseResponse {
			attrs = append(attrs, attribute.String(AttrPhase, PhaseResponse))
		}
		telemetry.Record(ctx, tr, l.span, telemetry.Phase{Name: l.leg, Start: l.start, End: l.end}, attrs...)
	}
	t.span.SetAttributes(attribute.Int("http.response.status_code", x.status))
	if x.status >= http.StatusInternalServerError {
		t.span.SetStatus(codes.Error, strconv.Itoa(x.status))
	}
	t.span.End()
}
