package telemetry

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// enabledCases are OTEL_* environments and whether each turns tracing on.
var enabledCases = []struct {
	name string
	env  map[string]string
	want bool
}{
	{"nothing set", nil, false},
	{"endpoint", map[string]string{EnvEndpoint: "http://127.0.0.1:4317"}, true},
	{"traces endpoint", map[string]string{EnvTracesEndpoint: "http://127.0.0.1:4317"}, true},
	{"otlp exporter named", map[string]string{EnvEndpoint: "http://c:4317", EnvTracesExporter: "otlp"}, true},
	{"exporter none", map[string]string{EnvEndpoint: "http://c:4317", EnvTracesExporter: "none"}, false},
	{"sdk disabled", map[string]string{EnvEndpoint: "http://c:4317", EnvSDKDisabled: "true"}, false},
	{"exporter without endpoint", map[string]string{EnvTracesExporter: "otlp"}, false},
}

func TestEnabled(t *testing.T) {
	for _, c := range enabledCases {
		t.Run(c.name, func(t *testing.T) {
			if got := Enabled(func(k string) string { return c.env[k] }); got != c.want {
				t.Fatalf("Enabled = %v, want %v", got, c.want)
			}
		})
	}
}

func TestStartOff(t *testing.T) {
	t.Setenv(EnvEndpoint, "http://127.0.0.1:1")
	tr, err := Start(context.Background(), false, "svc", "scope")
	if err != nil || tr.Tracer() != nil {
		t.Fatalf("--tracing=false: tracer %v, err %v; want nil, nil", tr.Tracer(), err)
	}
	t.Setenv(EnvEndpoint, "")
	tr, err = Start(context.Background(), true, "svc", "scope")
	if err != nil || tr.Tracer() != nil {
		t.Fatalf("no endpoint: tracer %v, err %v; want nil, nil", tr.Tracer(), err)
	}
	if err := tr.Close(time.Second); err != nil {
		t.Fatalf("Close of an off tracing: %v", err)
	}
}

func TestStartOnExportsWithEnvServiceName(t *testing.T) {
	t.Setenv(EnvEndpoint, "http://127.0.0.1:1") // nothing listens: export fails at flush, not here
	tr, err := Start(context.Background(), true, "svc", "scope")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Tracer() == nil {
		t.Fatal("tracer is nil with an endpoint set")
	}
	_ = tr.Close(100 * time.Millisecond)
}

func TestPropagationRoundTrip(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := Extract(context.Background(), func(k string) string {
		if k == "traceparent" {
			return tp
		}
		return ""
	})
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsRemote() || sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Fatalf("extracted %v", sc)
	}
	got := map[string]string{}
	Inject(ctx, func(k, v string) { got[k] = v })
	if got["traceparent"] != tp {
		t.Fatalf("injected %v, want traceparent %s", got, tp)
	}
}

func TestServerTiming(t *testing.T) {
	t0 := time.Unix(100, 0)
	got := ServerTiming(
		Phase{Name: "a", Start: t0, End: t0.Add(1500 * time.Microsecond)},
		Phase{Name: "skipped"},
		Phase{Name: "b", Start: t0, End: t0.Add(2 * time.Second)},
	)
	if want := "a;dur=1.500, b;dur=2000.000"; got != want {
		t.Fatalf("ServerTiming = %q, want %q", got, want)
	}
}

// A sampler the SDK would replace by its default stops the start, naming the variable.
func TestStartRejectsMalformedSampler(t *testing.T) {
	t.Setenv(EnvEndpoint, "http://127.0.0.1:1")
	t.Setenv(EnvTracesSampler, "traceidratio")
	t.Setenv(EnvTracesSamplerArg, "2")
	if _, err := Start(context.Background(), true, "svc", "scope"); err == nil || !strings.Contains(err.Error(), EnvTracesSamplerArg) {
		t.Fatalf("err %v, want one naming %s", err, EnvTracesSamplerArg)
	}
}
