package proxy

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pdgate/pdgate/cmd/internal/telemetry/telemetrytest"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
)

// A traced P/D request: the sidecar's spans hang under the EPP's traceparent, each leg carries
// its own span's traceparent to its engine, the phases tile the time to the first decode
// chunk, and a client that asked for a trace gets them in Server-Timing.
func TestTimelineSpansAndPropagation(t *testing.T) {
	rec := telemetrytest.New()
	decode, prefill := newFake(t, decodeOK), newFake(t, prefillOK)
	cfg := testConfig(decode, prefill.hp())
	cfg.Tracer = rec.Tracer
	env := startProxy(t, cfg)
	resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"hi","max_tokens":5,"stream":true}`, map[string]string{
		protocol.HeaderPrefillerHostPort: prefill.hp().String(), "traceparent": telemetrytest.ClientTraceparent, protocol.HeaderTrace: "1"})
	checkPrefillAnswer(t, resp, body, 200, outcomeOK, false)

	spans := rec.Ended()
	root := spans[SpanRequest]
	if root == nil || root.Parent().SpanID().String() != telemetrytest.ClientSpanID || root.SpanContext().TraceID().String() != telemetrytest.ClientTraceID {
		t.Fatalf("request span %v does not continue the EPP's traceparent", root)
	}
	for _, name := range []string{SpanSetup, SpanPrefill, SpanHandoff, SpanDecode} {
		s := spans[name]
		if s == nil || s.Parent().SpanID() != root.SpanContext().SpanID() {
			t.Fatalf("span %s missing or not under the request span (spans %v)", name, spans)
		}
	}
	// Each engine sees its leg's span as parent.
	for _, c := range []struct {
		f    *fake
		span string
	}{{prefill, SpanPrefill}, {decode, SpanDecode}} {
		got := c.f.only(t).Header.Get("traceparent")
		if want := spans[c.span].SpanContext().SpanID().String(); !strings.Contains(got, want) {
			t.Errorf("%s leg traceparent %q, want span %s", c.span, got, want)
		}
	}
	// The phases tile: each starts where the previous ended.
	order := []string{SpanSetup, SpanPrefill, SpanHandoff, SpanDecode}
	for i := 1; i < len(order); i++ {
		if !spans[order[i]].StartTime().Equal(spans[order[i-1]].EndTime()) {
			t.Errorf("%s starts at %v, %s ended at %v", order[i], spans[order[i]].StartTime(), order[i-1], spans[order[i-1]].EndTime())
		}
	}
	st := resp.Header.Get("Server-Timing")
	for _, ph := range []string{PhaseSetup, PhasePrefill, PhaseHandoff, PhaseDecodeFirstChunk} {
		if !strings.Contains(st, ph+";dur=") {
			t.Errorf("Server-Timing %q lacks %s", st, ph)
		}
	}
	if n := testutil.CollectAndCount(env.metrics.PhaseSeconds); n != 4 {
		t.Errorf("%d phase series, want 4", n)
	}
}

// Tracing off: no span, the client's traceparent reaches the engine untouched, and no
// Server-Timing unless asked for.
func TestTimelineOff(t *testing.T) {
	const parent = telemetrytest.ClientTraceparent
	decode := newFake(t, decodeOK)
	env := startProxy(t, testConfig(decode))
	resp, body := env.post(t, "/v1/completions", `{"model":"m","prompt":"hi"}`, map[string]string{"traceparent": parent})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := decode.only(t).Header.Get("traceparent"); got != parent {
		t.Errorf("engine got traceparent %q, want the client's %q", got, parent)
	}
	if st := resp.Header.Get("Server-Timing"); st != "" {
		t.Errorf("Server-Timing %q without x-pdgate-trace", st)
	}
}

// A traced SGLang request: the prefill leg runs on its own goroutine beside the decode, and its
// span still hangs under the request span with its traceparent sent to the prefill engine.
func TestTimelineConcurrentPrefill(t *testing.T) {
	rec := telemetrytest.New()
	pre := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		jsonAnswer(w, 200, map[string]any{"choices": []any{}})
	})
	dec := newFake(t, decodeOK)
	cfg := testConfig(dec, pre.hp(), protocol.HostPort{Host: "127.0.0.1", Port: 8998})
	cfg.Engine, cfg.Tracer = EngineSGLang, rec.Tracer
	env := startProxy(t, cfg)
	resp, body := env.post(t, "/v1/chat/completions", `{"model":"m","messages":[],"stream":true}`,
		map[string]string{protocol.HeaderPrefillerHostPort: pre.hp().String(), "traceparent": telemetrytest.ClientTraceparent})
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	var spans map[string]sdktrace.ReadOnlySpan
	testsupport.Eventually(t, 5*time.Second, "the prefill span", func() bool {
		spans = rec.Ended()
		return spans[SpanPrefill] != nil && spans[SpanRequest] != nil
	})
	root := spans[SpanRequest].SpanContext().SpanID()
	if spans[SpanPrefill].Parent().SpanID() != root || spans[SpanDecode].Parent().SpanID() != root {
		t.Fatalf("prefill or decode span not under the request span")
	}
	if got := pre.only(t).Header.Get("traceparent"); !strings.Contains(got, spans[SpanPrefill].SpanContext().SpanID().String()) {
		t.Errorf("prefill leg traceparent %q, want the prefill span's", got)
	}
}
