package sidecar

import (
	"fmt"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/test/testsupport"
)

// TestPrefillOnCombinedPod: the EPP may pick a combined pod for the prefill stage, and a
// combined pod's endpoint is its sidecar, so the decode sidecar's prefill leg goes through a
// second sidecar before it reaches the combined engine. That sidecar must hand the engine the
// leg's producer fields, or the engine keeps no KV: TRT-LLM generation_first then answered 404
// (the decode engine's KV pull found nothing), and the other dialects prefilled twice.
func TestPrefillOnCombinedPod(t *testing.T) {
	tests := []struct {
		name, dialect string
		sidecarArgs   []string
	}{
		{name: "trtllm generation_first", dialect: "trtllm", sidecarArgs: []string{"--trt-schedule-style", "generation_first"}},
		{name: "trtllm context_first", dialect: "trtllm", sidecarArgs: []string{"--trt-schedule-style", "context_first"}},
		{name: "vllm nixlv2", dialect: "vllm", sidecarArgs: []string{"--kv-connector", "nixlv2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cp, csp, dp, dsp := testsupport.FreePort(t), testsupport.FreePort(t), testsupport.FreePort(t), testsupport.FreePort(t)
			common := []string{"--host", "127.0.0.1", "--dialect", tt.dialect, "--time-scale", "20"}
			start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", cp), append([]string{"--role", "combined", "--port", fmt.Sprint(cp)}, common...)...)
			start(t, "sim", fmt.Sprintf("http://127.0.0.1:%d/health", dp), append([]string{"--role", "decode", "--port", fmt.Sprint(dp)}, common...)...)
			combined := fmt.Sprintf("127.0.0.1:%d", csp)
			start(t, "sidecar", "http://"+combined+"/sidecar/healthz", append([]string{"--listen", combined,
				"--engine-url", fmt.Sprintf("http://127.0.0.1:%d", cp), "--engine", tt.dialect, "--allowlist", "127.0.0.1:1"}, tt.sidecarArgs...)...)
			decode := fmt.Sprintf("http://127.0.0.1:%d", dsp)
			start(t, "sidecar", decode+"/sidecar/healthz", append([]string{"--listen", fmt.Sprintf("127.0.0.1:%d", dsp),
				"--engine-url", fmt.Sprintf("http://127.0.0.1:%d", dp), "--engine", tt.dialect, "--allowlist", combined,
				"--prefill-failure-policy", "fail-fast"}, tt.sidecarArgs...)...)
			for i := 0; i < 2; i++ {
				res := stream(t, decode, map[string]string{"x-prefiller-host-port": combined},
					strings.Replace(chatBody, "please", fmt.Sprintf("please (%d)", i), 1))
				if res.status != 200 || res.chunks < 2 || !res.done || strings.Contains(res.raw, `"error"`) {
					t.Fatalf("request %d: status %d, %d chunks, done=%v:\n%s", i, res.status, res.chunks, res.done, tail(res.raw, 2000))
				}
				if got := res.header.Get("x-pdgate-prefill-outcome"); got != "ok" {
					t.Fatalf("request %d: prefill outcome %q, want ok (the combined pod's KV was used)", i, got)
				}
			}
			legs := testsupport.MetricSample(t, "http://"+combined+"/sidecar/metrics", fmt.Sprintf(`pdgate_sidecar_requests_total{code="200",engine="%s",mode="prefill-leg"}`, tt.dialect))
			if legs != 2 {
				t.Errorf("combined sidecar served %v prefill legs, want 2", legs)
			}
		})
	}
}
