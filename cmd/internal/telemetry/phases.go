package telemetry

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// PhaseMetric is the name of the per-phase histogram the EPP and the sidecar both export; the
// phase label tells the two processes' phases apart.
const PhaseMetric = "pdgate_request_phase_seconds"

// NewPhaseHistogram is PhaseMetric with buckets from 0.5 ms (an EPP scheduling cycle) to
// 60 s (a long prompt's prefill behind a queue).
func NewPhaseHistogram(help string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    PhaseMetric,
		Help:    help,
		Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"phase"})
}

// Phase is one interval of a request, timed where the work happened.
type Phase struct {
	Name       string
	Start, End time.Time
}

// Seconds is the phase's length, 0 when it never ended.
func (p Phase) Seconds() float64 {
	if p.Start.IsZero() || p.End.Before(p.Start) {
		return 0
	}
	return p.End.Sub(p.Start).Seconds()
}

// Record ends a span named name covering the phase, as a child of ctx's span; it returns the
// span's context so a later hop can name it as parent. tr must not be nil.
func Record(ctx context.Context, tr trace.Tracer, name string, p Phase, attrs ...attribute.KeyValue) context.Context {
	return RecordWith(ctx, tr, name, p, trace.WithAttributes(attrs...))
}

// RecordWith is Record with the attributes as one option (trace.WithAttributes), so that a
// caller on the request path can build constant attributes once rather than per span.
func RecordWith(ctx context.Context, tr trace.Tracer, name string, p Phase, attrs trace.SpanStartOption) context.Context {
	ctx, span := tr.Start(ctx, name, trace.WithTimestamp(p.Start), attrs)
	span.End(trace.WithTimestamp(p.End))
	return ctx
}

// ServerTiming renders phases as a W3C Server-Timing header value
// ("prefill;dur=12.345, decode;dur=3.210", milliseconds), the summary a client that asked for
// a trace gets; phases that never ran are left out.
func ServerTiming(phases ...Phase) string {
	var b strings.Builder
	for _, p := range phases {
		if p.Start.IsZero() || p.End.IsZero() {
			continue
		}
		if b.Len() > 0 {
			b.WriteString(", ")
		}
		b.WriteString(p.Name)
		b.WriteString(";dur=")
		b.WriteString(strconv.FormatFloat(p.Seconds()*1e3, 'f', 3, 64))
	}
	return b.String()
}
