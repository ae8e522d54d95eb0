package server

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdgate/pdgate/cmd/internal/telemetry"
	"github.com/pdgate/pdgate/cmd/sim/batching"
)

// Each engine traces a request in its own shape, under the traceparent the request came with
// (the sidecar sends its leg span's), and the simulator records the same shape per dialect so
// that a lab trace splits each prefill or decode leg into the engine's queue, compute and KV
// transfer the way the real engine's trace would:
//
//   - vLLM (--otlp-traces-endpoint) ends each finished request with one server span,
//     "llm_request", whose gen_ai.latency.* attributes are the request's intervals in
//     seconds: queue (queued → first scheduled), prefill (first scheduled → first token),
//     decode, inference, TTFT and end to end from arrival.
//   - TensorRT-LLM (trtllm-serve --otlp_traces_endpoint) copies vLLM's span name and kind but
//     not all its attributes: no model prefill/decode/inference times; its time_in_queue is
//     first scheduled minus arrival; it adds gen_ai.latency.kv_cache_transfer_time with the
//     events kv_cache_transfer_start/_end, and gen_ai.response.finish_reasons.
//   - SGLang (--enable-trace --otlp-traces-endpoint) records no attributes with durations:
//     its spans are the timeline (tracing_sglang.go).
//
// The simulator's attributes are model time (metrics.go, intervalsOf); span timestamps are
// wall time (model time converted by the clock's scale), so the engine's spans nest inside
// the sidecar's leg spans at any --time-scale and agree with the attributes at scale 1.
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

	// TensorRT-LLM's additions (tensorrt_llm/llmapi/tracing.py).
	AttrKVTransferTime    = "gen_ai.latency.kv_cache_transfer_time"
	AttrFinishReasons     = "gen_ai.response.finish_reasons"
	EventKVTransferStart  = "kv_cache_transfer_start"
	EventKVTransferFinish = "kv_cache_transfer_end"
)

// engineTrace is what a traced exchange keeps for its spans: the caller's trace context, the
// wall-clock arrival (where the spans start) and, on a decode leg, when the pulled KV began
// and finished arriving (model time).
type engineTrace struct {
	parent      context.Context
	start       time.Time
	kvStart     time.Time
	kvFinish    time.Time
	hasTransfer bool
}

// startEngineTrace captures the trace context of a request that arrived at the wall-clock
// instant arrived; the zero value (no tracer) records nothing.
func (in *Instance) startEngineTrace(r *http.Request, arrived time.Time) engineTrace {
	if in.opts.Tracer == nil {
		return engineTrace{}
	}
	return engineTrace{parent: telemetry.Extract(r.Context(), r.Header.Get), start: arrived}
}

// transferred notes a decode leg's KV transfer, from the KV available at the producer to
// the last of it here (model time).
func (t *engineTrace) transferred(from, to time.Time) {
	t.kvStart, t.kvFinish, t.hasTransfer = from, to, true
}

// engineSpan records the finished request's spans in its dialect's shape.
func (x *exchange) engineSpan(p batching.Progress) {
	if x.trace.parent == nil {
		return
	}
	switch x.in.opts.Dialect {
	case DialectSGLang:
		x.sglangSpans(p)
	case DialectTRTLLM:
		x.llmRequestSpan(p, x.trtAttrs(p))
	default:
		x.llmRequestSpan(p, x.vllmAttrs(p))
	}
}

// wall maps a model-time instant of this exchange to the wall clock.
func (x *exchange) wall(t time.Time) time.Time {
	d := t.Sub(x.arrival)
	if s, ok := x.in.clock.(interface {
		Wall(time.Duration) time.Duration
	}); ok {
		d = s.Wall(d)
	}
	return x.trace.start.Add(d)
}

func (x *exchange) llmRequestSpan(p batching.Progress, attrs []attribute.KeyValue) {
	_, span := x.in.opts.Tracer.Start(x.trace.parent, SpanEngineRequest, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(x.trace.start), trace.WithAttributes(attrs...))
	if x.in.opts.Dialect == DialectTRTLLM && x.trace.hasTransfer {
		span.AddEvent(EventKVTransferStart, trace.WithTimestamp(x.wall(x.trace.kvStart)))
		span.AddEvent(EventKVTransferFinish, trace.WithTimestamp(x.wall(x.trace.kvFinish)))
	}
	span.End(trace.WithTimestamp(x.wall(p.DoneAt)))
}

func (x *exchange) usageAttrs(p batching.Progress) []attribute.KeyValue {
	return []attribute.KeyValue{
		attribute.String(AttrRequestID, x.meta.id),
		attribute.Int(AttrPromptTokens, len(x.req.tokens)),
		attribute.Int(AttrCompletionTokens, p.Generated),
		attribute.Float64(AttrE2E, p.DoneAt.Sub(x.arrival).Seconds()),
	}
}

func (x *exchange) vllmAttrs(p batching.Progress) []attribute.KeyValue {
	iv := intervalsOf(p)
	attrs := x.usageAttrs(p)
	if iv.scheduled {
		attrs = append(attrs, attribute.Float64(AttrTimeInQueue, iv.queue))
	}
	if iv.firstToken {
		attrs = append(attrs, attribute.Float64(AttrTimeToFirstToken, p.FirstTokenAt.Sub(x.arrival).Seconds()),
			attribute.Float64(AttrTimeInPrefill, iv.prefill), attribute.Float64(AttrTimeInDecode, iv.decode),
			attribute.Float64(AttrTimeInInference, iv.inference))
	}
	return attrs
}

// trtAttrs are TensorRT-LLM's: its queue counts from the request's arrival, so on a
// generation leg, where the simulator pulls the KV before admitting the request, it holds
// the transfer too, which kv_cache_transfer_time reports on its own.
func (x *exchange) trtAttrs(p batching.Progress) []attribute.KeyValue {
	attrs := x.usageAttrs(p)
	if !p.ScheduledAt.IsZero() {
		attrs = append(attrs, attribute.Float64(AttrTimeInQueue, p.ScheduledAt.Sub(x.arrival).Seconds()))
	}
	if !p.FirstTokenAt.IsZero() {
		attrs = append(attrs, attribute.Float64(AttrTimeToFirstToken, p.FirstTokenAt.Sub(x.arrival).Seconds()))
	}
	if x.trace.hasTransfer {
		attrs = append(attrs, attribute.Float64(AttrKVTransferTime, x.trace.kvFinish.Sub(x.trace.kvStart).Seconds()))
	}
	reasons, _ := json.Marshal([]string{x.out.finishReason()})
	return append(attrs, attribute.String(AttrFinishReasons, string(reasons)))
}
