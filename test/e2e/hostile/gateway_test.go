package hostile

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/test/testsupport/labtest"
)

// startLab runs one roleset of AIBrix's pd strategy and a combined pod, every decode-capable
// pod behind a sidecar, with a small EPP body limit.
func startLab(t *testing.T, subnet string) *lab.Lab {
	t.Helper()
	cfg := filepath.Join(repoRoot, "config")
	topo := fmt.Sprintf(`name: hostile
eppConfig: %s/aibrix-pd.yaml
simProfile: %s/sim/llama3-8b-h100.yaml
timeScale: 10
eppArgs: ["--max-request-body-bytes=65536"]
pods:
- {name: prefill-a, role: prefill, roleset: rs-a, engine: vllm, kvConnector: nixl}
- {name: decode-a, role: decode, roleset: rs-a, engine: vllm, kvConnector: nixl}
- {name: combined, role: combined, engine: vllm, kvConnector: nixl}
`, cfg, cfg)
	return labtest.Start(t, lab.Options{Topology: labtest.WriteTopology(t, topo), BinDir: binDir, Subnet: subnet})
}

// sidecarRejections sums every sidecar's allow-list rejections.
func sidecarRejections(t *testing.T, l *lab.Lab) float64 {
	t.Helper()
	total := 0.0
	for _, p := range l.Plan.Pods {
		if !p.HasSidecar() {
			continue
		}
		m, err := labtest.Metrics("http://" + p.Endpoint() + "/sidecar/metrics")
		if err != nil {
			t.Fatal(err)
		}
		total += m["pdgate_sidecar_allowlist_rejections_total"]
	}
	return total
}

// Routing headers a client sends at the gateway never reach an engine or a sidecar: the EPP
// overwrites or removes every one, internal headers included, so requests succeed, no trap
// is ever called and no sidecar had anything to refuse.
func TestSpoofedRoutingHeadersAtGateway(t *testing.T) {
	l := startLab(t, "127.0.91")
	tr := newTrap(t, "127.0.0.1:0")
	evil := fmt.Sprintf("127.0.0.1:%d", tr.Port())
	spoofs := map[string]string{
		"x-prefiller-host-port":              evil,
		"x-encoder-hosts-ports":              evil + "," + evil,
		"x-pdgate-prefiller-bootstrap-port":  fmt.Sprint(tr.Port()),
		"x-pdgate-prefiller-engine":          "sglang",
		"x-pdgate-prefiller-kv-connector":    "shared-storage",
		"x-data-parallel-host-port":          evil,
		"x-gateway-destination-endpoint":     evil,
		"x-pdgate-internal-immediate-status": "200",
		"x-pdgate-internal-immediate-body":   `{"spoofed":true}`,
		"x-pdgate-prefill-outcome":           "ok",
	}
	for i := 0; i < 12; i++ {
		hdr := map[string]string{}
		for k, v := range spoofs {
			if i%2 == 0 || k != "x-gateway-destination-endpoint" {
				hdr[k] = v
			}
		}
		code, _, body := post(t, l.URL, hdr, chat)
		if code != http.StatusOK || !strings.Contains(body, `"choices"`) || strings.Contains(body, "spoofed") {
			t.Fatalf("request %d: %d %s", i, code, body)
		}
	}
	if n := tr.Hits(); n != 0 {
		t.Errorf("spoofed headers reached the trap %d times", n)
	}
	if n := sidecarRejections(t, l); n != 0 {
		t.Errorf("spoofed targets reached a sidecar (%v allow-list rejections)", n)
	}
}

// Oversized bodies: 413 from the EPP (its limit, below the gateway's) and from the sidecar
// (its own limit), with an error body; a body just under the limits passes.
func TestOversizedBodies(t *testing.T) {
	l := startLab(t, "127.0.92")
	big := func(n int) string {
		return `{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":1,"messages":[{"role":"user","content":"` + strings.Repeat("a", n) + `"}]}`
	}
	code, _, body := post(t, l.URL, nil, big(100<<10))
	if code != http.StatusRequestEntityTooLarge {
		t.Fatalf("EPP: %d %s", code, body)
	}
	if m, _ := labtest.Metrics(fmt.Sprintf("http://127.0.0.1:%d/metrics", l.Plan.EPPMetricsPort)); m["pdgate_epp_request_body_rejected_total"] < 1 {
		t.Errorf("the 413 did not come from the EPP: %v", m["pdgate_epp_request_body_rejected_total"])
	}
	if code, _, body := post(t, l.URL, nil, big(8<<10)); code != http.StatusOK {
		t.Fatalf("small body: %d %s", code, body)
	}

	url, _ := vllmPair(t, "--max-request-bytes", "4096")
	if code, _, body := post(t, url, nil, big(5000)); code != http.StatusRequestEntityTooLarge || !strings.Contains(body, `"error"`) && !strings.Contains(body, `"message"`) {
		t.Fatalf("sidecar: %d %s", code, body)
	}
	if code, _, body := post(t, url, nil, big(1000)); code != http.StatusOK {
		t.Fatalf("sidecar small body: %d %s", code, body)
	}
}
