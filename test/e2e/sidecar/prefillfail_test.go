package sidecar

import (
	"fmt"
	"testing"

	"github.com/pdgate/pdgate/test/testsupport"
)

// TestPrefillFailIsVisible runs the simulator's prefill-fail fault against the real sidecar
// with its default policy: every request whose prefill did not run on the pod the EPP named
// says so in x-pdgate-prefill-outcome and in pdgate_sidecar_prefill_diverted_total, on the
// sidecar's metrics page, the moment it happens; with an alternate prefill pod of the same
// roleset the one retry goes there.
func TestPrefillFailIsVisible(t *testing.T) {
	tests := []struct {
		name        string
		alternate   bool
		wantOutcome string
		wantSeries  string
	}{
		{name: "no alternate: one retry on the same pod, then local prefill", wantOutcome: "fallback-local",
			wantSeries: `pdgate_sidecar_prefill_diverted_total{engine="vllm",outcome="fallback-local",reason="http_status"}`},
		{name: "the retry goes to the alternate", alternate: true, wantOutcome: "alternate",
			wantSeries: `pdgate_sidecar_prefill_diverted_total{engine="vllm",outcome="alternate",reason="http_status"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad, good, dp, sp := testsupport.FreePort(t), testsupport.FreePort(t), testsupport.FreePort(t), testsupport.FreePort(t)
			start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", bad), "--host", "127.0.0.1", "--port", fmt.Sprint(bad),
				"--role", "prefill", "--time-scale", "20", "--fault-prefill-fail-rate", "1")
			allow := fmt.Sprintf("127.0.0.1:%d", bad)
			hdr := map[string]string{"x-prefiller-host-port": fmt.Sprintf("127.0.0.1:%d", bad)}
			if tt.alternate {
				start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", good), "--host", "127.0.0.1", "--port", fmt.Sprint(good),
					"--role", "prefill", "--time-scale", "20")
				allow += fmt.Sprintf(",127.0.0.1:%d", good)
				hdr["x-pdgate-prefiller-alternate-host-port"] = fmt.Sprintf("127.0.0.1:%d", good)
			}
			start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", dp), "--host", "127.0.0.1", "--port", fmt.Sprint(dp),
				"--role", "decode", "--time-scale", "20")
			url := fmt.Sprintf("http://127.0.0.1:%d", sp)
			start(t, "sidecar", url+"/sidecar/healthz", "--listen", fmt.Sprintf("127.0.0.1:%d", sp),
				"--engine-url", fmt.Sprintf("http://127.0.0.1:%d", dp), "--allowlist", allow, "--kv-connector", "nixlv2")
			const n = 3
			for i := 0; i < n; i++ {
				res := stream(t, url, hdr, chatBody)
				if res.status != 200 || !res.done {
					t.Fatalf("status %d done %v: %s", res.status, res.done, res.raw)
				}
				if got := res.header.Get("x-pdgate-prefill-outcome"); got != tt.wantOutcome {
					t.Fatalf("outcome %q, want %q", got, tt.wantOutcome)
				}
			}
			if got := testsupport.MetricSample(t, url+"/sidecar/metrics", tt.wantSeries); got != n {
				t.Fatalf("%s = %v, want %d", tt.wantSeries, got, n)
			}
		})
	}
}
