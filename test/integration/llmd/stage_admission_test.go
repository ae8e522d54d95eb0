package llmd

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"

	"github.com/pdgate/pdgate/test/inprocepp"
	"github.com/pdgate/pdgate/test/testsupport"
)

// Stage-aware admission through the real EPP: the prefill tier is saturated (6 waiting per
// prefill pod, threshold 5), the decode tier idle. A fleet-wide detector over the same pool
// (GIE's, measured here for comparison) averages to 0.6 and would admit sheddable work the
// prefill tier cannot take; pdgate's admission takes the prefill tier's 1.2 and sheds it with
// 429 and llm-d's reason header, while non-sheddable requests keep being served by decode.
func TestStageAwareAdmissionSheds429(t *testing.T) {
	pods := []inprocepp.Pod{
		{Name: "prefill-0", IP: "127.0.24.1", Labels: map[string]string{"llm-d.ai/role": "prefill"}, Metrics: testsupport.VLLMMetrics(6, 1)},
		{Name: "prefill-1", IP: "127.0.24.2", Labels: map[string]string{"llm-d.ai/role": "prefill"}, Metrics: testsupport.VLLMMetrics(6, 1)},
		{Name: "decode-0", IP: "127.0.24.3", Labels: map[string]string{"llm-d.ai/role": "decode"}, Metrics: testsupport.VLLMMetrics(0, 1)},
		{Name: "decode-1", IP: "127.0.24.4", Labels: map[string]string{"llm-d.ai/role": "decode"}, Metrics: testsupport.VLLMMetrics(0, 1)},
	}
	e := inprocepp.Start(t, "testdata/stage-admission/stage-admission.yaml", pods, inprocepp.Options{PoolName: "stage-admission"})
	e.SetObjective("batch", -1)
	eps := e.WaitScraped(t, map[string]int{"prefill-0": 6, "prefill-1": 6, "decode-0": 0, "decode-1": 0})

	// The configured detector itself, measured over the whole pool (what GIE's admission does).
	fleetWide := e.Saturation(t, "utilization-detector", eps)
	t.Logf("fleet-wide utilization-detector saturation over the same pool: %.2f (< 1: it would admit)", fleetWide)
	if fleetWide >= 1 {
		t.Fatalf("fleet-wide saturation %.2f, the comparison needs < 1", fleetWide)
	}

	body := `{"model":"m","prompt":"hello"}`
	shed, done, err := e.Open("/v1/completions", map[string]string{metadata.ObjectiveKey: "batch"}, body, 10*time.Second)
	done()
	if err != nil {
		t.Fatal(err)
	}
	if shed.Immediate != http.StatusTooManyRequests || shed.ImmediateHeaders["x-llm-d-request-dropped-reason"] != "rejected-saturated" {
		t.Fatalf("sheddable request: %d %v, want 429 with x-llm-d-request-dropped-reason: rejected-saturated", shed.Immediate, shed.ImmediateHeaders)
	}
	served := (&epp{EPP: e}).send(t, "/v1/completions", nil, body)
	if served.immediate != 0 || !strings.HasPrefix(served.destination, "127.0.24.") ||
		(!strings.HasPrefix(served.destination, "127.0.24.3:") && !strings.HasPrefix(served.destination, "127.0.24.4:")) {
		t.Fatalf("non-sheddable request: %v, want routed to a decode pod", served)
	}
}

// llm-d's pd-topology-epp-config.yaml through the real EPP: the prefill pod is always picked on
// the decode pick's host (topology-affinity-filter, minAffinity host) among prefill pods spread
// over two hosts.
func TestTopologyPairingKeepsKVOnTheHost(t *testing.T) {
	host := func(h string, role string) map[string]string {
		return map[string]string{"llm-d.ai/role": role, "kubernetes.io/hostname": h, "topology.kubernetes.io/zone": "z1"}
	}
	pods := []inprocepp.Pod{
		{Name: "p-a", IP: "127.0.25.1", Labels: host("node-a", "prefill"), Metrics: inprocepp.IdleVLLM},
		{Name: "p-b", IP: "127.0.25.2", Labels: host("node-b", "prefill"), Metrics: inprocepp.IdleVLLM},
		{Name: "d-a", IP: "127.0.25.3", Labels: host("node-a", "decode"), Metrics: inprocepp.IdleVLLM},
		{Name: "d-b", IP: "127.0.25.4", Labels: host("node-b", "decode"), Metrics: inprocepp.IdleVLLM},
	}
	e := inprocepp.Start(t, "testdata/llmd-deploy-2026-08/pd-topology-epp-config.yaml", pods, inprocepp.Options{PoolName: "stage-admission-topo"})
	e.WaitScraped(t, map[string]int{"p-a": 0, "p-b": 0, "d-a": 0, "d-b": 0})
	pair := map[string]string{"127.0.25.3": "127.0.25.1", "127.0.25.4": "127.0.25.2"}
	seen := map[string]bool{}
	for i := 0; i < 20; i++ {
		prompt := strings.Repeat(fmt.Sprintf("request %d asks about topology-aware pairing. ", i), 20)
		a := (&epp{EPP: e}).send(t, "/v1/completions", nil, fmt.Sprintf(`{"model":"m","prompt":%q}`, prompt))
		if a.immediate != 0 {
			t.Fatalf("request %d: %v", i, a)
		}
		decodeIP, _, _ := strings.Cut(a.destination, ":")
		prefillIP, _, _ := strings.Cut(a.set["x-prefiller-host-port"], ":")
		if prefillIP == "" {
			t.Fatalf("request %d was not disaggregated: %v", i, a)
		}
		if pair[decodeIP] != prefillIP {
			t.Fatalf("request %d: decode %s, prefill %s: not on the same host", i, decodeIP, prefillIP)
		}
		seen[decodeIP] = true
	}
	t.Logf("decode hosts used: %v", seen)
}
