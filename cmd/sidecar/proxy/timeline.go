package proxy

import (
	"context"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdgate/pdgate/cmd/internal/telemetry"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// The sidecar's phases of a request (the phase label of pdgate_request_phase_seconds, the
// pdgate.phase attribute of their spans, the names in Server-Timing). On a sequential P/D
// request they tile the sidecar's time up to the first decode chunk.
const (
	// PhaseSetup: from the request's arrival to the first leg sent (body read, parsed, legs
	// planned; an E/P/D request's encode legs are in it).
	PhaseSetup = "sidecar_setup"
	// PhasePrefill: the prefill leg, every attempt, until its answer was read.
	PhasePrefill = "prefill"
	// PhaseHandoff: from the prefill's answer to the decode leg sent (the decode body built
	// from the prefill's kv_transfer_params or bootstrap fields).
	PhaseHandoff = "handoff"
	// PhaseDecodeFirstChunk: from the decode leg sent to its first body bytes: the engine's
	// KV pull, its queue and its first decode step.
	PhaseDecodeFirstChunk = "decode_first_chunk"
)

// Span names.
const (
	SpanRequest = "pdgate.sidecar.request"
	SpanSetup   = "pdgate.sidecar.setup"
	SpanPrefill = "pdgate.sidecar.prefill"
	SpanHandoff = "pdgate.sidecar.handoff"
	SpanDecode  = "pdgate.sidecar.decode"
	attrPhase   = "pdgate.phase"
)

// timeline is one request's phase boundaries and, when tracing is on, its spans. The
// boundaries are written by the handler's goroutine only (a concurrent prefill leg records
// its own span and histogram).
type timeline struct {
	ctx          context.Context // carries the request span; nil when tracing is off
	span         trace.Span
	prefillStart time.Time
	prefillEnd   time.Time
	decodeSent   time.Time
	firstChunk   time.Time
}

func (tl *timeline) setup(start time.Time) telemetry.Phase {
	end := tl.prefillStart
	if end.IsZero() {
		end = tl.decodeSent
	}
	return telemetry.Phase{Name: PhaseSetup, Start: start, End: end}
}

func (tl *timeline) phases(start time.Time) [4]telemetry.Phase {
	handoff := telemetry.Phase{Name: PhaseHandoff}
	if !tl.prefillEnd.IsZero() && !tl.decodeSent.IsZero() {
		handoff.Start, handoff.End = tl.prefillEnd, tl.decodeSent
	}
	return [4]telemetry.Phase{
		tl.setup(start),
		{Name: PhasePrefill, Start: tl.prefillStart, End: tl.prefillEnd},
		handoff,
		{Name: PhaseDecodeFirstChunk, Start: tl.decodeSent, End: tl.firstChunk},
	}
}

// startTrace opens the sidecar's request span under the EPP's traceparent.
func (p *Proxy) startTrace(rq *request, r *http.Request) {
	tr := p.cfg.Tracer
	if tr == nil {
		return
	}
	parent := telemetry.Extract(r.Context(), r.Header.Get)
	rq.tl.ctx, rq.tl.span = tr.Start(parent, SpanRequest, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(rq.start), trace.WithAttributes(attribute.String("pdgate.request_id", rq.id),
			attribute.String("pdgate.engine", string(p.cfg.Engine))))
}

// legSpan opens the span of an outgoing leg (prefill, decode) under the request span and
// returns ctx carrying it (ctx's deadline and cancellation unchanged); the leg's headers get
// its traceparent from injectLeg, so the engine's own spans hang under it. The span is nil
// when tracing is off.
func (pl *pipeline) legSpan(ctx context.Context, name, phase string, start time.Time) (context.Context, trace.Span) {
	if pl.rq.tl.ctx == nil {
		return ctx, nil
	}
	_, span := pl.cfg.Tracer.Start(pl.rq.tl.ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String(attrPhase, phase)))
	return trace.ContextWithSpan(ctx, span), span
}

// injectLeg writes the traceparent of the leg span ctx carries into a leg's headers.
func (pl *pipeline) injectLeg(ctx context.Context, hdr http.Header) {
	if pl.rq.tl.ctx != nil {
		telemetry.Inject(ctx, hdr.Set)
	}
}

// endLegSpan ends a leg's span at end, marked failed when class is not empty.
func endLegSpan(span trace.Span, end time.Time, class string) {
	if span == nil {
		return
	}
	if class != "" {
		span.SetStatus(codes.Error, class)
	}
	span.End(trace.WithTimestamp(end))
}

// finishTimeline observes the request's phases and ends its spans.
func (p *Proxy) finishTimeline(rq *request, w http.ResponseWriter) {
	status := 0
	if sr, ok := w.(*statusRecorder); ok {
		status = sr.code()
	}
	tl := &rq.tl
	ph := tl.phases(rq.start)
	for _, f := range ph {
		if !f.Start.IsZero() && !f.End.IsZero() {
			p.cfg.Metrics.PhaseSeconds.WithLabelValues(f.Name).Observe(f.Seconds())
		}
	}
	if tl.span == nil {
		return
	}
	tr := p.cfg.Tracer
	for _, f := range []struct {
		span string
		ph   telemetry.Phase
	}{{SpanSetup, ph[0]}, {SpanHandoff, ph[2]}} {
		if !f.ph.Start.IsZero() && !f.ph.End.IsZero() {
			telemetry.Record(tl.ctx, tr, f.span, f.ph, attribute.String(attrPhase, f.ph.Name))
		}
	}
	tl.span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= http.StatusInternalServerError {
		tl.span.SetStatus(codes.Error, http.StatusText(status))
	}
	tl.span.End()
}

// serverTiming sets the sidecar's phases as Server-Timing when the client asked for a trace
// (x-pdgate-trace, as for the EPP's decision trace); the EPP puts its own phases ahead.
func (pl *pipeline) serverTiming(h http.Header, firstChunk time.Time) {
	if !traceAsked(pl.rq.header.Get(protocol.HeaderTrace)) {
		return
	}
	tl := pl.rq.tl
	tl.firstChunk = firstChunk
	ph := tl.phases(pl.rq.start)
	if v := telemetry.ServerTiming(ph[:]...); v != "" {
		h.Set("Server-Timing", v)
	}
}

// traceAsked reads x-pdgate-trace as the EPP does ("1" or "true", any case).
func traceAsked(v string) bool {
	v = strings.TrimSpace(v)
	return v == "1" || strings.EqualFold(v, "true")
}
