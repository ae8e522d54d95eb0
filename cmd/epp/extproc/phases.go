package extproc

import (
	"context"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/pdgate/pdgate/cmd/internal/telemetry"
)

// The EPP's phases of a request, as the phase label of pdgate_request_phase_seconds, the
// pdgate.phase attribute of their spans and the names in Server-Timing.
const (
	// PhaseQueue runs from the request headers' arrival until admission let the request
	// through: the body's arrival, parsing, and the wait in admission (flow control).
	PhaseQueue = "epp_queue"
	// PhaseScheduling runs from admission until the routing decision is ready: candidates,
	// PrepareData, admission plugins, the scheduler, the conditional-decode gate, PreRequest.
	PhaseScheduling = "epp_scheduling"
)

// Span names. GIE v1.5.0's EPP emitted gateway.request (the ext_proc stream) and
// gateway.request_orchestration (its director's HandleRequest, our Decide). pdgate keeps both
// names and makes the orchestration span the scheduling phase itself (admission → decision),
// with the wait before admission as its sibling pdgate.epp.queue: three spans a request, not
// four, because every span costs the request path its creation and its export (the bench's
// `+tracing` configs measure it).
const (
	SpanRequest       = "gateway.request"
	SpanOrchestration = "gateway.request_orchestration"
	SpanQueue         = "pdgate.epp.queue"
	// AttrPhase names the phase a span times, so a trace's phases can be summed by name.
	AttrPhase = "pdgate.phase"
)

var (
	phaseSeconds = telemetry.NewPhaseHistogram("Time a request spent in each phase of its path, in seconds " +
		"(EPP: epp_queue, epp_scheduling; sidecar: sidecar_setup, prefill, kv_handoff, decode_first_chunk).")
	// Resolved once: a label lookup per request would hash the label each time.
	observeQueue      = phaseSeconds.WithLabelValues(PhaseQueue)
	observeScheduling = phaseSeconds.WithLabelValues(PhaseScheduling)
)

func init() {
	crmetrics.Registry.MustRegister(phaseSeconds)
}

// timeline is one request's phase boundaries and, when tracing is on, its request span.
type timeline struct {
	ctx      context.Context // carries span's context; nil when tracing is off
	span     telemetry.Span
	admitted time.Time
	decided  time.Time
	// admissionWait is the time spent in admission alone, inside the queue phase.
	admissionWait time.Duration
	carrier       traceCarrier
}

// startRequestSpan opens gateway.request as a child of the client's (or the gateway's)
// traceparent, at the moment the request headers arrived. With the EPP's tracer the span is a
// value recorded when it ends (telemetry.StartSpan), not the SDK's live span: the SDK's cost
// 13k instructions a request, and its conversion at export most of the rest.
func (x *exchange) startRequestSpan(ctx context.Context) {
	tr := x.s.opts.Tracer
	if tr == nil {
		return
	}
	parent := telemetry.Propagator.Extract(ctx, &x.tl.carrier)
	x.tl.ctx, x.tl.span = telemetry.StartSpan(parent, tr, SpanRequest, trace.SpanKindServer, x.received,
		[]attribute.KeyValue{attribute.String("pdgate.request_id", x.requestID)})
}

// W3C trace-context header names, as the propagator asks for them.
const (
	headerTraceparent = "traceparent"
	headerTracestate  = "tracestate"
)

// traceCarrier is the request's W3C trace context (traceparent, tracestate) for the
// propagator. onRequestHeaders picks both headers out in the loop that already reads every
// header, by their lower-case names, so extracting them searches nothing; a search by
// case-insensitive name over every header, twice a request (tracestate is usually absent, so
// it never ends early), cost 2,000 to 4,000 instructions. Injecting sets them in headers and
// folds other-case copies away only when the client sent one.
type traceCarrier struct {
	headers       map[string]string
	parent, state string
	// exact records that a value came under its lower-case name, which wins over other cases.
	exactParent, exactState bool
	// folded is set when a trace header came under a name not in lower case: Set must then
	// remove that copy, or the upstream would see the client's value beside the EPP's.
	folded bool
}

// read takes one request header, lower being its name in lower case; it reports whether the
// header is a trace-context one.
func (c *traceCarrier) read(key, lower, value string) bool {
	var v *string
	var exact *bool
	switch lower {
	case headerTraceparent:
		v, exact = &c.parent, &c.exactParent
	case headerTracestate:
		v, exact = &c.state, &c.exactState
	default:
		return false
	}
	if key == lower {
		*v, *exact = value, true
		return true
	}
	c.folded = true
	if !*exact {
		*v = value
	}
	return true
}

// Get returns a trace-context header read by read; the propagator asks for nothing else.
func (c *traceCarrier) Get(key string) string {
	switch key {
	case headerTraceparent:
		return c.parent
	case headerTracestate:
		return c.state
	}
	return ""
}

// Set writes a request header for the upstream, replacing the client's copy whatever its case.
func (c *traceCarrier) Set(key, value string) {
	if c.folded {
		for k := range c.headers {
			if k != key && strings.EqualFold(k, key) {
				delete(c.headers, k)
			}
		}
	}
	c.headers[key] = value
}

// Keys lists the headers Get answers.
func (c *traceCarrier) Keys() []string { return []string{headerTraceparent, headerTracestate} }

// recordDecision observes the phases of a request that was admitted (and scheduled, when
// scheduled is true), records their spans and, for a request that goes on, passes its trace
// context upstream as GIE's EPP did.
func (x *exchange) recordDecision(scheduled bool) {
	t := &x.tl
	if t.admitted.IsZero() {
		return
	}
	queue := telemetry.Phase{Name: PhaseQueue, Start: x.received, End: t.admitted}
	sched := telemetry.Phase{Name: PhaseScheduling, Start: t.admitted, End: t.decided}
	observeQueue.Observe(queue.Seconds())
	if scheduled {
		observeScheduling.Observe(sched.Seconds())
	}
	if t.ctx == nil {
		return
	}
	tr := x.s.opts.Tracer
	// Both phases are known only once they ended: RecordEnded hands them over as ended spans.
	telemetry.RecordEnded(t.ctx, tr, SpanQueue, queue, queueAttrs)
	if scheduled {
		telemetry.RecordEnded(t.ctx, tr, SpanOrchestration, sched, []attribute.KeyValue{schedPhaseAttr,
			attribute.String("target_model", x.targetModel), attribute.Int("request_prio", x.priority)})
		telemetry.Propagator.Inject(t.ctx, &t.carrier)
	}
}

// The phase attributes, built once: every allocation a span adds is paid per request. The
// spans only read them.
var (
	queueAttrs     = []attribute.KeyValue{attribute.String(AttrPhase, PhaseQueue)}
	schedPhaseAttr = attribute.String(AttrPhase, PhaseScheduling)
)

// endRequestSpan ends gateway.request when the stream ends.
func (x *exchange) endRequestSpan() {
	if x.tl.ctx == nil {
		return
	}
	code := codes.Unset
	if x.errCode != "" {
		code = codes.Error
	}
	x.tl.span.End(time.Now(), code, x.errCode)
}

// serverTiming is the EPP's phases as a Server-Timing value, ahead of what the upstream
// (the sidecar) reported, for a client that asked for a trace.
func (x *exchange) serverTiming(upstream string) string {
	v := telemetry.ServerTiming(
		telemetry.Phase{Name: PhaseQueue, Start: x.received, End: x.tl.admitted},
		telemetry.Phase{Name: PhaseScheduling, Start: x.tl.admitted, End: x.tl.decided})
	switch {
	case upstream == "":
		return v
	case v == "":
		return upstream
	}
	return v + ", " + upstream
}

// headerServerTiming carries the phase summary (W3C Server-Timing).
const headerServerTiming = "server-timing"

// HeaderFlowQueueDuration is llm-d v0.11's response header: the whole milliseconds a request
// spent in flow-control admission. Only a request flow control admitted carries it; an answer
// to a refused one never does.
const HeaderFlowQueueDuration = "x-llm-d-flow-queue-duration-ms"

// flowQueueDuration is the header's value, and whether the request has one.
func (x *exchange) flowQueueDuration() (string, bool) {
	if !x.s.cfg.FlowControl || x.tl.admitted.IsZero() {
		return "", false
	}
	return strconv.FormatInt(x.tl.admissionWait.Milliseconds(), 10), true
}

// respHeader is a response header by case-insensitive name.
func (x *exchange) respHeader(name string) string {
	for k, v := range x.respHeaders {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}
