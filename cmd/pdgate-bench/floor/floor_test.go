package floor

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/cmd/internal/extproctest"
)

// TestFloorAnswersTheEPPExchange drives the floor with the dev gateway's ext_proc client (the
// bench's client): each body size is routed to the fixed pod with its body returned whole and
// its response phase echoed, as an EPP answers.
func TestFloorAnswersTheEPPExchange(t *testing.T) {
	c, err := extprocclient.Dial(extproctest.Listen(t, NewServer("10.0.0.7:8000")), extprocclient.Options{ChunkSize: 16 << 10, MessageTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, size := range []int{0, 1 << 10, 220 << 10} {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		s, err := c.Open(ctx)
		if err != nil {
			t.Fatal(err)
		}
		body := []byte(strings.Repeat("x", size))
		r, err := s.Route(ctx, extprocclient.HeaderMap(map[string]string{":method": "POST", ":path": "/v1/completions"}), body)
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if d := r.Destinations(); len(d) != 1 || d[0] != "10.0.0.7:8000" || r.Status() != 0 {
			t.Fatalf("%d bytes: destinations %v status %d", size, d, r.Status())
		}
		if !bytes.Equal(r.Body, body) {
			t.Fatalf("%d bytes: %d bytes forwarded", size, len(r.Body))
		}
		resp := []byte(`{"usage":{"completion_tokens":1}}`)
		if _, err := s.ResponseHeaders(ctx, extprocclient.HeaderMap(map[string]string{":status": "200"}), "10.0.0.7:8000", false); err != nil {
			t.Fatal(err)
		}
		var got []byte
		if err := s.RelayResponseBody(ctx, bytes.NewReader(resp), func(b []byte) error { got = append(got, b...); return nil }); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, resp) {
			t.Fatalf("response body %q, want %q", got, resp)
		}
		if err := s.Finish(ctx); err != nil {
			t.Fatal(err)
		}
		s.Close()
		cancel()
	}
}

func TestMetricsPageListsEveryEndpoint(t *testing.T) {
	page := metricsPage([]string{"127.0.0.2:8000", "127.0.0.3:8000"})
	if n := strings.Count(page, "inference_pool_per_pod_queue_size{"); n != 2 {
		t.Fatalf("%d series:\n%s", n, page)
	}
}

// The bench asks the floor, like every EPP, for a full collection before each metered window.
func TestMetricsPortRunsACollectionOnRequest(t *testing.T) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rec := httptest.NewRecorder()
	metricsMux([]string{"127.0.0.2:8000"}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/heap?gc=1", nil))
	runtime.ReadMemStats(&after)
	if rec.Code != http.StatusOK || after.NumForcedGC <= before.NumForcedGC {
		t.Fatalf("status %d, forced collections %d -> %d", rec.Code, before.NumForcedGC, after.NumForcedGC)
	}
	rec = httptest.NewRecorder()
	metricsMux([]string{"127.0.0.2:8000"}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if !strings.Contains(rec.Body.String(), "inference_pool_per_pod_queue_size{") {
		t.Fatalf("metrics page: %q", rec.Body.String())
	}
}
