package extproc

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdgate/pdgate/cmd/internal/telemetry"
	"github.com/pdgate/pdgate/cmd/internal/telemetry/telemetrytest"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// readHeaders is an exchange whose request headers hdr were read as onRequestHeaders reads
// them: into the plugins' map, with the trace-context ones picked out on the way.
func readHeaders(s *Server, hdr map[string]string) *exchange {
	x := newExchange(s, nil, logr.Discard())
	for k, v := range hdr {
		x.headers[k] = v
		x.tl.carrier.read(k, strings.ToLower(k), v)
	}
	x.received = time.Now()
	x.tl.admitted, x.tl.decided = x.received, x.received
	return x
}

// The EPP continues the client's trace whatever case its trace-context headers came in, a
// lower-case copy winning over another case's, and sends one traceparent upstream: the
// client's copy under another case is replaced, not left beside it.
func TestTraceContextHeaderCase(t *testing.T) {
	const otherSpan = "00-11111111111111111111111111111111-2222222222222222-01"
	for _, tc := range []struct {
		name       string
		hdr        map[string]string
		traceID    string // the trace the request span continues; "" for a new one
		traceState string
	}{
		{name: "lower case", hdr: map[string]string{"traceparent": telemetrytest.ClientTraceparent}, traceID: telemetrytest.ClientTraceID},
		{name: "canonical case", hdr: map[string]string{"Traceparent": telemetrytest.ClientTraceparent, "Tracestate": "v=1"},
			traceID: telemetrytest.ClientTraceID, traceState: "v=1"},
		{name: "lower case wins", hdr: map[string]string{"TRACEPARENT": otherSpan, "traceparent": telemetrytest.ClientTraceparent,
			"tracestate": "v=1", "TraceState": "v=2"}, traceID: telemetrytest.ClientTraceID, traceState: "v=1"},
		{name: "none", hdr: map[string]string{"x-other": "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Repeated: a map's order differs from one iteration to the next, and the winner
			// must not depend on it.
			for range 20 {
				rec := telemetrytest.New()
				x := readHeaders(&Server{opts: Options{Tracer: rec.Tracer}}, tc.hdr)
				x.startRequestSpan(context.Background())
				x.recordDecision(true)
				x.endRequestSpan()
				req := rec.Ended()[SpanRequest]
				if req == nil {
					t.Fatal("no request span")
				}
				sc := req.SpanContext()
				if tc.traceID != "" && (sc.TraceID().String() != tc.traceID || req.Parent().SpanID().String() != telemetrytest.ClientSpanID) {
					t.Fatalf("request span trace %s parent %s, want the client's %s / %s", sc.TraceID(), req.Parent().SpanID(),
						tc.traceID, telemetrytest.ClientSpanID)
				}
				if tc.traceID == "" && req.Parent().IsValid() {
					t.Fatalf("request span has parent %s; the client sent no traceparent", req.Parent().SpanID())
				}
				if got := sc.TraceState().String(); got != tc.traceState {
					t.Fatalf("trace state %q, want %q", got, tc.traceState)
				}
				var names []string
				for k := range x.headers {
					if strings.EqualFold(k, headerTraceparent) {
						names = append(names, k)
					}
				}
				up := telemetrytest.SpanContext(x.headers[headerTraceparent])
				if !slices.Equal(names, []string{headerTraceparent}) || up.SpanID() != sc.SpanID() || up.TraceID() != sc.TraceID() {
					t.Fatalf("upstream traceparent headers %v = %q, want one naming span %s", names, x.headers[headerTraceparent], sc.SpanID())
				}
			}
		})
	}
}

// BenchmarkTraceContextRead is the extraction that starts gateway.request, with few or many
// other headers (Envoy sends names in lower case; a client's traceparent usually comes without
// a tracestate): pick-out reads the carrier onRequestHeaders filled in the loop that already
// visits every header (two more cases of its switch on the lower-case name); fold-search looks
// both names up case-insensitively over every header, as the EPP did before, and a missing
// tracestate scans them all.
func BenchmarkTraceContextRead(b *testing.B) {
	for _, n := range []int{4, 16, 48} {
		hdr := map[string]string{"traceparent": telemetrytest.ClientTraceparent}
		for i := range n {
			hdr[fmt.Sprintf("x-header-%d", i)] = "value"
		}
		x := readHeaders(&Server{}, hdr)
		ctx := context.Background()
		b.Run(fmt.Sprintf("pick-out/%d", n), func(b *testing.B) {
			for b.Loop() {
				sink = trace.SpanContextFromContext(telemetry.Propagator.Extract(ctx, &x.tl.carrier))
			}
		})
		b.Run(fmt.Sprintf("fold-search/%d", n), func(b *testing.B) {
			c := foldSearch(maps.Clone(x.headers))
			for b.Loop() {
				sink = trace.SpanContextFromContext(telemetry.Propagator.Extract(ctx, c))
			}
		})
	}
}

var sink trace.SpanContext

// foldSearch finds a header by case-insensitive name as the request path did before: an
// exact hit, else a scan of every header (protocol.HeaderValue).
type foldSearch map[string]string

func (h foldSearch) Get(name string) string { return protocol.HeaderValue(h, name) }
func (foldSearch) Set(string, string)       {}
func (foldSearch) Keys() []string           { return nil }
