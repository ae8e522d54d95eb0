package server

import (
	"context"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdgate/pdgate/cmd/internal/telemetry"
	"github.com/pdgate/pdgate/cmd/sim/batching"
)

// A vLLM started with --otlp-traces-endpoint ends each finished request with one server span,
// "llm_request", under the traceparent the request came with, carrying the request's engine
// intervals as gen_ai.latency.* attributes (seconds). The sidecar sends its leg span's
// traceparent to the engine, so this span is what splits a prefill or decode leg into the
// engine's queue and compute. The simulator records the same span for its vLLM dialect, the
// intervals in model time (metrics.go, intervalsOf); SGLang and TensorRT-LLM trace in other
// shapes, which it does not imitate.
const (
	SpanEngineRequest = "llm_request"

	AttrRequestID        = "gen_ai.request.id"
	AttrPromptTokens     = "gen_ai.usage.prompt_tokens"
	AttrCompletionTokens = "gen_ai.usage.completion_tokens"
	AttrTimeToFirstToken = "gen_ai.latency.time_to_first_token"
	AttrE2E              = "gen_ai.latency.e2e"
	AttrTimeInQueue      = "gen_ai.latency.time_in_queue"
	AttrTimeInPrefill    = "gen_ai.latency.time_in_model_prefill"
	AttrTimeInDecode     = "gen_ai.latency.time_in_model_decode"
	AttrTimeInInference  = "gen_ai.latency.time_in_model_inference"
)

// engineTrace is what a traced exchange keeps for its span: the caller's trace context and
// the wall-clock arrival (the span's start; the attributes are model time).
type engineTrace struct {
	parent context.Context
	start  time.Time
}

// startEngineTrace captures the trace context of a request to a traced vLLM dialect; the
// zero value (no tracer, another dialect) records nothing.
func (in *Instance) startEngineTrace(r *http.Request) engineTrace {
	if in.opts.Tracer == nil || in.opts.Dialect != DialectVLLM {
		return engineTrace{}
	}
	return engineTrace{parent: telemetry.Extract(r.Context(), r.Header.Get), start: time.Now()}
}

// engineSpan records the finished request's span.
func (x *exchange) engineSpan(p batching.Progress) {
	if x.trace.parent == nil {
		return
	}
	iv := intervalsOf(p)
	attrs := []attribute.KeyValue{
		attribute.String(AttrRequestID, x.meta.id),
		attribute.Int(AttrPromptTokens, len(x.req.tokens)),
		attribute.Int(AttrCompletionTokens, p.Generated),
		attribute.Float64(AttrE2E, p.DoneAt.Sub(x.arrival).Seconds()),
	}
	if iv.scheduled {
		attrs = append(attrs, attribute.Float64(AttrTimeInQueue, iv.queue))
	}
	if iv.firstToken {
		attrs = append(attrs, attribute.Float64(AttrTimeToFirstToken, p.FirstTokenAt.Sub(x.arrival).Seconds()),
			attribute.Float64(AttrTimeInPrefill, iv.prefill), attribute.Float64(AttrTimeInDecode, iv.decode),
			attribute.Float64(AttrTimeInInference, iv.inference))
	}
	_, span := x.in.opts.Tracer.Start(x.trace.parent, SpanEngineRequest, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(x.trace.start), trace.WithAttributes(attrs...))
	span.End()
}
