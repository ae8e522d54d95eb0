package lab

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pdgate/pdgate/cmd/pdgate/lab/otlpreceiver"
)

// The receiver's variables reach every process that traces, a router started later too, and what the processes export lands in the span file as JSON lines.
func TestOTLPReceiverAndSpanFile(t *testing.T) {
	plan := testPlan(t)
	plan.Dir = t.TempDir()
	l := &Lab{Plan: plan, procs: plan.Procs("endpoints.yaml")}
	if err := l.startOTLP(); err != nil {
		t.Fatal(err)
	}
	router := plan.routerProcs("endpoints.yaml", plan.ownRouter(), "-2")
	l.traced(router)
	other := []ProcSpec{{Name: "prometheus"}} // scrapes; exports no spans
	if l.traced(other); len(other[0].Env) != 0 {
		t.Errorf("prometheus got %v", other[0].Env)
	}
	want := map[string]bool{"sim-p-0": true, "sim-d-0": true, "sim-e-0": true, "sidecar-d-0": true, "sidecar-d-1": true,
		"sidecar-c-0": true, "epp": true, "gateway": true, "epp-2": true, "gateway-2": true}
	endpoint := "OTEL_EXPORTER_OTLP_ENDPOINT=" + l.OTLPEndpoint
	for _, p := range append(l.procs, router...) {
		w, ok := want[p.Name]
		if !ok {
			continue
		}
		delete(want, p.Name)
		if got := slices.Contains(p.Env, endpoint); got != w {
			t.Errorf("%s: OTLP endpoint in its environment %v, want %v (env %v)", p.Name, got, w, p.Env)
		}
	}
	if len(want) > 0 {
		t.Fatalf("processes not planned: %v", want)
	}

	// An exporter configured only by the variables the processes get.
	for _, kv := range l.otlpEnv {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	exp, err := otlptracegrpc.New(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp))
	for _, name := range []string{"a", "b", "c"} {
		_, s := tp.Tracer("test").Start(context.Background(), name)
		s.End()
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := l.stopOTLP(); err != nil {
		t.Fatal(err)
	}
	l.spans.write([]otlpreceiver.Span{{Name: "late"}}) // after the stop: dropped, not a panic
	f, err := os.Open(l.SpansPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var names []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var s otlpreceiver.Span
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		names = append(names, s.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"a", "b", "c"}) {
		t.Fatalf("span file holds %v, want a, b, c", names)
	}
}
