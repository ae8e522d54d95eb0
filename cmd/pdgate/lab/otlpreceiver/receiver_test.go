package otlpreceiver

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Spans sent by the SDK's own OTLP gRPC exporter arrive flattened, in every mode.
func TestReceiverGetsWhatTheSDKExports(t *testing.T) {
	tests := []struct {
		name      string
		keep, cb  bool
		wantSpans bool // Spans/Trace return them
	}{
		{"count only", false, false, false},
		{"keep", true, false, true},
		{"callback", false, true, false},
		{"keep and callback", true, true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []Span
			o := Options{Keep: tc.keep}
			if tc.cb {
				o.OnSpans = func(s []Span) { mu.Lock(); got = append(got, s...); mu.Unlock() }
			}
			r, err := Start(o)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpointURL(r.Endpoint()))
			if err != nil {
				t.Fatal(err)
			}
			res := resource.NewSchemaless(attribute.String("service.name", "pdgate/test"))
			tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
			tr := tp.Tracer("test")
			start := time.Unix(1_700_000_000, 0)
			ctx, root := tr.Start(context.Background(), "root", trace.WithTimestamp(start),
				trace.WithAttributes(attribute.String("pdgate.request_id", "r1")))
			_, child := tr.Start(ctx, "child", trace.WithTimestamp(start.Add(time.Millisecond)), trace.WithAttributes(
				attribute.String("pdgate.phase", "prefill"), attribute.Int("status", 502), attribute.Bool("ok", false), attribute.Float64("ratio", 0.25)))
			child.End(trace.WithTimestamp(start.Add(3 * time.Millisecond)))
			root.End(trace.WithTimestamp(start.Add(5 * time.Millisecond)))
			if err := tp.Shutdown(context.Background()); err != nil { // flushes the batch
				t.Fatal(err)
			}
			if r.Count() != 2 {
				t.Fatalf("counted %d spans, want 2", r.Count())
			}
			if tc.cb {
				mu.Lock()
				checkSpans(t, got)
				mu.Unlock()
			}
			kept := r.Trace("root", "pdgate.request_id", "r1")
			if !tc.wantSpans {
				if len(r.Spans()) != 0 || kept != nil {
					t.Fatalf("kept spans without Keep: %v", r.Spans())
				}
				return
			}
			checkSpans(t, kept)
			if r.Trace("root", "pdgate.request_id", "other") != nil {
				t.Error("a trace for a request id no span carries")
			}
		})
	}
}

func checkSpans(t *testing.T, spans []Span) {
	t.Helper()
	by := map[string]Span{}
	for _, s := range spans {
		by[s.Name] = s
	}
	root, child := by["root"], by["child"]
	if len(spans) != 2 || root.Service != "pdgate/test" || root.Parent != "" || child.Parent != root.SpanID ||
		child.TraceID != root.TraceID || len(root.TraceID) != 32 || len(root.SpanID) != 16 {
		t.Fatalf("spans %+v", spans)
	}
	if root.Duration() != 5*time.Millisecond || child.Start.Sub(root.Start) != time.Millisecond || child.Duration() != 2*time.Millisecond {
		t.Errorf("timestamps: root %v + %v, child %v + %v", root.Start, root.Duration(), child.Start, child.Duration())
	}
	want := map[string]string{"pdgate.phase": "prefill", "status": "502", "ok": "false", "ratio": "0.25"}
	for k, v := range want {
		if child.Attrs[k] != v {
			t.Errorf("attribute %s = %q, want %q (all: %v)", k, child.Attrs[k], v, child.Attrs)
		}
	}
}
