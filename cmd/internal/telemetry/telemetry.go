// Package telemetry is the OpenTelemetry tracing set-up shared by bin/epp, bin/sidecar and
// bin/gateway: off unless an OTLP endpoint is configured through the standard OTEL_*
// variables, and then spans go to it over OTLP gRPC. When off, the binaries hold a nil
// trace.Tracer and skip every tracing call, so the request path pays one nil check.
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Env names the set-up reads itself; the exporter and the SDK read the others
// (OTEL_EXPORTER_OTLP_*, OTEL_TRACES_SAMPLER[_ARG], OTEL_RESOURCE_ATTRIBUTES).
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	EnvServiceName    = "OTEL_SERVICE_NAME"
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"
)

// Tracing is one process's tracer provider; the zero value (and nil) is tracing off.
type Tracing struct {
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
}

// Enabled reports whether the OTEL_* environment asks for spans: an OTLP endpoint is set,
// the SDK is not disabled, and the traces exporter is otlp (or unset). GIE's EPP exported
// to a console exporter, or to localhost:4317, when nothing was configured; pdgate exports
// nothing then, so a binary started without a collector neither prints nor dials.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(strings.TrimSpace(getenv(EnvSDKDisabled)), "true") {
		return false
	}
	if e := strings.TrimSpace(getenv(EnvTracesExporter)); e != "" && !strings.EqualFold(e, "otlp") {
		return false
	}
	return strings.TrimSpace(getenv(EnvEndpoint)) != "" || strings.TrimSpace(getenv(EnvTracesEndpoint)) != ""
}

// Start sets up tracing when on is true and the environment asks for it (Enabled); it
// returns a Tracing that is off otherwise. service is the service.name used when
// OTEL_SERVICE_NAME is unset. The caller ends it with Shutdown, which flushes the spans.
func Start(ctx context.Context, on bool, service, scope string) (*Tracing, error) {
	if !on || !Enabled(os.Getenv) {
		return &Tracing{}, nil
	}
	bc, err := BatchConfigFromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("reading the span batch settings: %w", err)
	}
	sampler, err := SamplerFromEnv(os.Getenv)
	if err != nil {
		return nil, fmt.Errorf("reading the trace sampler: %w", err)
	}
	// Later detectors win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES override the default.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("building the trace resource: %w", err)
	}
	return NewTracing(ctx, NewOTLPClient(), bc, sampler, res, scope)
}

// NewOTLPClient is the OTLP gRPC trace client with pdgate's encoder of export requests
// (exportCodec); opts are otlptracegrpc's, after the environment: the client reads the
// endpoint, its scheme (http:// means plaintext), headers, timeout and compression itself.
func NewOTLPClient(opts ...otlptracegrpc.Option) otlptrace.Client {
	return otlptracegrpc.NewClient(append([]otlptracegrpc.Option{otlptracegrpc.WithDialOption(exporterDialOptions()...)}, opts...)...)
}

// NewTracing is tracing on, exporting through client: the SDK's spans through the OTLP
// exporter built on it, the Tracer's own spans (StartSpan, RecordEnded) through it directly,
// both batched by one Batcher. One sampler serves the provider and the Tracer, so that both
// decide alike. scope is the tracer's instrumentation scope name.
func NewTracing(ctx context.Context, client otlptrace.Client, bc BatchConfig, sampler sdktrace.Sampler,
	res *resource.Resource, scope string) (*Tracing, error) {
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("creating the OTLP trace exporter: %w", err)
	}
	b := NewBatcher(exp, client, bc)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b), sdktrace.WithResource(res), sdktrace.WithSampler(sampler))
	return &Tracing{tp: tp, tracer: NewTracer(tp.Tracer(scope), b, sampler, res, instrumentation.Scope{Name: scope})}, nil
}

// ForceFlush exports every span ended so far; a no-op when tracing is off.
func (t *Tracing) ForceFlush(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	if err := t.tp.ForceFlush(ctx); err != nil {
		return fmt.Errorf("flushing spans: %w", err)
	}
	return nil
}

// Tracer is the process's tracer, nil when tracing is off: callers guard every span with a
// nil check, which is what makes off free.
func (t *Tracing) Tracer() trace.Tracer {
	if t == nil {
		return nil
	}
	return t.tracer
}

// Shutdown flushes and stops the exporter; a no-op when tracing is off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil || t.tp == nil {
		return nil
	}
	if err := t.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("shutting down the tracer provider: %w", err)
	}
	return nil
}

// Close flushes the spans still batched, bounded by timeout so that a collector that went
// away cannot hold a process's exit.
func (t *Tracing) Close(timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return t.Shutdown(ctx)
}

// Propagator is W3C trace context (traceparent, tracestate), the one format every hop of
// pdgate reads and writes, whatever global propagator a library installed.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Extract returns ctx carrying the remote span context of the headers read by get
// (case-insensitive names are the getter's business).
func Extract(ctx context.Context, get func(string) string) context.Context {
	return Propagator.Extract(ctx, funcCarrier(get))
}

// Inject writes ctx's span context (traceparent, tracestate) with set.
func Inject(ctx context.Context, set func(key, value string)) {
	Propagator.Inject(ctx, setCarrier(set))
}

type funcCarrier func(string) string

func (f funcCarrier) Get(k string) string { return f(k) }
func (funcCarrier) Set(string, string)    {}
func (funcCarrier) Keys() []string        { return nil }

type setCarrier func(string, string)

func (setCarrier) Get(string) string { return "" }
func (f setCarrier) Set(k, v string) { f(k, v) }
func (setCarrier) Keys() []string    { return nil }
