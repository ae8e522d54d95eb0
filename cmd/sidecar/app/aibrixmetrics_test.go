package app

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
)

// TestAIBrixFailureCounter drives failing requests through a running sidecar and reads
// AIBrix's gateway_request_model_fail_total{status, status_code} from /sidecar/metrics: a
// prefill the prefiller fails under fail-fast, and a decode the watchdog gives up on. Without
// --aibrix-metrics the series does not exist.
func TestAIBrixFailureCounter(t *testing.T) {
	tests := []struct {
		name          string
		aibrixMetrics bool
		prefill       bool // send the request with a prefill target (which answers 500)
		wantStatus    int
		wantLabels    map[string]string // nil: no series expected
	}{
		{name: "prefill failure, fail-fast", aibrixMetrics: true, prefill: true, wantStatus: 500,
			wantLabels: map[string]string{"status": "pd_prefill_failure", "status_code": "500"}},
		{name: "decode watchdog", aibrixMetrics: true, wantStatus: 504,
			wantLabels: map[string]string{"status": "pd_decode_watchdog", "status_code": "504"}},
		{name: "prefill failure without --aibrix-metrics", prefill: true, wantStatus: 500},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"AIBRIX_PREFILL_REQUEST_TIMEOUT", "AIBRIX_DECODE_FIRST_RESPONSE_TIMEOUT", "INFERENCE_POOL", "POD_NAME"} {
				t.Setenv(k, "")
			}
			prefiller := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = io.WriteString(w, `{"error":"prefill failed"}`)
			}))
			defer prefiller.Close()
			// The decode engine never answers: only the watchdog ends such a request.
			engine := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
				_, _ = io.ReadAll(r.Body)
				<-r.Context().Done()
			}))
			defer engine.Close()
			pu, _ := url.Parse(prefiller.URL)

			o := NewOptions()
			o.Listen, o.EngineURL, o.Allowlist, o.Logger = "127.0.0.1:0", engine.URL, pu.Host, logr.Discard()
			o.FailurePolicy, o.PrefillRetryOnce, o.AIBrixMetrics = "fail-fast", false, tt.aibrixMetrics
			o.FirstResponseTimeout = 100 * time.Millisecond
			addr, cancel, done := startRun(t, o)
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Errorf("Run: %v", err)
				}
			}()
			base := "http://" + addr

			req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true,"messages":[]}`))
			req.Header.Set("Content-Type", "application/json")
			if tt.prefill {
				req.Header.Set(protocol.HeaderPrefillerHostPort, pu.Host)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.wantStatus)
			}

			family := testsupport.MetricFamilies(t, base+MetricsPath)["gateway_request_model_fail_total"]
			if tt.wantLabels == nil {
				if family != nil {
					t.Fatalf("gateway_request_model_fail_total exported without --aibrix-metrics: %v", family)
				}
				return
			}
			if family == nil || len(family.GetMetric()) != 1 {
				t.Fatalf("gateway_request_model_fail_total: want one series, got %v", family)
			}
			m := family.GetMetric()[0]
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if len(got) != len(tt.wantLabels) {
				t.Errorf("labels %v, want %v", got, tt.wantLabels)
			}
			for k, v := range tt.wantLabels {
				if got[k] != v {
					t.Errorf("label %s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			if v := m.GetCounter().GetValue(); v != 1 {
				t.Errorf("value %v, want 1", v)
			}
		})
	}
}
