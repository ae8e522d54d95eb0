package proxy

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/internal/telemetry/telemetrytest"
)

// The gateway starts a trace when the client sent none and gives the EPP (and, when the EPP
// sets none, the upstream) its span's traceparent; a client's traceparent is continued.
func TestGatewayTraceparent(t *testing.T) {
	for _, clientTP := range []string{"", telemetrytest.ClientTraceparent} {
		rec := telemetrytest.New()
		got := make(chan upstreamSeen, 1)
		up := startUpstream(t, `{"id":"x"}`, got)
		f := &fakeEPP{decide: func(map[string]string, []byte) decision { return decision{dest: up} }}
		o := testOptions()
		o.Tracer = rec.Tracer
		gw := httptest.NewServer(New(o, startFakeEPP(t, f), nil))
		req, _ := http.NewRequest(http.MethodPost, gw.URL+"/v1/completions", strings.NewReader(`{"model":"m","prompt":"p"}`))
		if clientTP != "" {
			req.Header.Set("traceparent", clientTP)
		}
		resp, err := http.DefaultClient.Do(req)
		answer(t, resp, err)
		gw.Close()
		u := <-got
		spans := rec.Ended()
		root := spans[SpanRequest]
		if root == nil {
			t.Fatalf("client traceparent %q: no %s span in %v", clientTP, SpanRequest, spans)
		}
		want := "00-" + root.SpanContext().TraceID().String() + "-" + root.SpanContext().SpanID().String() + "-01"
		if tp := u.headers.Get("traceparent"); tp != want {
			t.Errorf("client traceparent %q: upstream got %q, want %q", clientTP, tp, want)
		}
		f.seen.mu.Lock()
		eppTP := f.seen.reqHeaders["traceparent"]
		f.seen.mu.Unlock()
		if eppTP != want {
			t.Errorf("client traceparent %q: EPP saw %q, want %q", clientTP, eppTP, want)
		}
		if clientTP != "" && !strings.Contains(clientTP, root.Parent().SpanID().String()) {
			t.Errorf("gateway span's parent %s is not the client's %q", root.Parent().SpanID(), clientTP)
		}
		for _, leg := range []string{SpanRouting, SpanForward, SpanUpstream, SpanResponse} {
			if s := spans[leg]; s == nil || s.Parent().SpanID() != root.SpanContext().SpanID() {
				t.Errorf("leg span %s missing or not under the gateway's span", leg)
			}
		}
		if clientTP == "" && root.Parent().IsValid() {
			t.Errorf("gateway span has parent %v without a client traceparent", root.Parent())
		}
	}
}
