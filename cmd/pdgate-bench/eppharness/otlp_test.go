package eppharness

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// The receiver counts what the EPP's own exporter (OTLP gRPC, the SDK's batch processor)
// sends it, configured the way otlpEnv configures the EPP.
func TestOTLPReceiverCountsExportedSpans(t *testing.T) {
	r, err := StartOTLPReceiver()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	for _, kv := range otlpEnv(r.Addr, 1) {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	ctx := context.Background()
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	tr := tp.Tracer("test")
	for range 7 {
		_, s := tr.Start(ctx, "span")
		s.End()
	}
	if err := tp.Shutdown(ctx); err != nil { // flushes the batch
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r.Spans() < 7 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if r.Spans() != 7 {
		t.Fatalf("receiver counted %d spans, want 7", r.Spans())
	}
}

func TestOTLPEnvSampler(t *testing.T) {
	for _, tc := range []struct {
		ratio float64
		want  []string
	}{
		{0, []string{"OTEL_TRACES_SAMPLER=parentbased_always_on"}},
		{1, []string{"OTEL_TRACES_SAMPLER=parentbased_always_on"}},
		{0.1, []string{"OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG=0.1"}},
	} {
		env := otlpEnv("127.0.0.1:1", tc.ratio)
		if env[0] != "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:1" || env[1] != "OTEL_BSP_SCHEDULE_DELAY=1000" || !slices.Equal(env[2:], tc.want) {
			t.Errorf("ratio %v: %v", tc.ratio, env)
		}
	}
}
