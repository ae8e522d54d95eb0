package lab

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/epp/endpoints"
)

func testPlan(t *testing.T) *Plan {
	t.Helper()
	return planFor(t, `name: t
eppConfig: epp.yaml
pods:
- {name: p, role: prefill, roleset: a, engine: sglang}
- {name: d, role: decode, roleset: a, engine: sglang, count: 2}
- {name: c, role: combined, engine: sglang, buckets: {min: 0, max: 512}}
- {name: e, role: encode, engine: sglang}
`, PlanOptions{Subnet: "127.0.42", BinDir: "/bin-dir"})
}

func TestPlanAddressesAndEndpoints(t *testing.T) {
	plan := testPlan(t)
	want := []struct{ name, ip, endpoint string }{
		{"p-0", "127.0.42.10", "127.0.42.10:8000"},
		{"d-0", "127.0.42.11", "127.0.42.11:8001"},
		{"d-1", "127.0.42.12", "127.0.42.12:8001"},
		{"c-0", "127.0.42.13", "127.0.42.13:8001"},
		{"e-0", "127.0.42.14", "127.0.42.14:8000"},
	}
	if len(plan.Pods) != len(want) {
		t.Fatalf("got %d pods", len(plan.Pods))
	}
	for i, w := range want {
		p := plan.Pods[i]
		if p.Name != w.name || p.IP != w.ip || p.Endpoint() != w.endpoint {
			t.Errorf("pod %d = %s %s %s, want %+v", i, p.Name, p.IP, p.Endpoint(), w)
		}
	}
	if plan.Pods[0].BootstrapPort != BootstrapPort || plan.Pods[1].BootstrapPort != 0 {
		t.Error("only SGLang prefill pods get a bootstrap port")
	}
	b, err := plan.EndpointsYAML()
	if err != nil {
		t.Fatal(err)
	}
	eps, err := endpoints.Parse(b) // the EPP's own strict reader
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 5 || eps[1].Port != SidecarPort || eps[1].MetricsPort != EnginePort {
		t.Fatalf("endpoints %+v", eps)
	}
	labels := eps[0].Labels
	if labels["llm-d.ai/role"] != "prefill" || labels["role-name"] != "prefill" || labels["roleset-name"] != "a" ||
		labels["model.aibrix.ai/engine"] != "sglang" || labels["inference.networking.k8s.io/engine-type"] != "sglang" {
		t.Errorf("prefill labels %v", labels)
	}
	if eps[0].Annotations["model.aibrix.ai/sglang-bootstrap-port"] != "8998" {
		t.Errorf("prefill annotations %v", eps[0].Annotations)
	}
	comb := eps[3]
	if comb.Labels["llm-d.ai/role"] != "both" || comb.Labels["role-name"] != "" ||
		!strings.Contains(comb.Annotations["model.aibrix.ai/config"], `"combined":true`) ||
		!strings.Contains(comb.Annotations["model.aibrix.ai/config"], `"promptLenBucketMaxLength":512`) {
		t.Errorf("combined endpoint %+v", comb)
	}
}

func TestProcs(t *testing.T) {
	plan := testPlan(t)
	procs := plan.Procs("/run/endpoints.yaml")
	names := []string{}
	for _, p := range procs {
		names = append(names, p.Name)
	}
	got := strings.Join(names, " ")
	if got != "sim-p-0 sim-d-0 sim-d-1 sim-c-0 sim-e-0 sidecar-d-0 sidecar-d-1 sidecar-c-0 epp gateway" {
		t.Fatalf("procs %s", got)
	}
	side := strings.Join(procs[5].Args, " ")
	for _, w := range []string{"--listen 127.0.42.11:8001", "--engine-url http://127.0.42.11:8000", "--engine sglang", "127.0.42.10:8998"} {
		if !strings.Contains(side, w) {
			t.Errorf("sidecar args %q lack %q", side, w)
		}
	}
	epp := strings.Join(procs[8].Args, " ")
	if !strings.Contains(epp, "--endpoints-file /run/endpoints.yaml") || !strings.Contains(epp, "--secure-serving=true") ||
		!strings.Contains(epp, fmt.Sprintf("--prefill-release-address=127.0.0.1:%d", plan.EPPMetricsPort)) {
		t.Errorf("epp args %q", epp)
	}
	if procs[0].Binary != "/bin-dir/sim" || procs[9].Health == "" {
		t.Errorf("binary %s health %q", procs[0].Binary, procs[9].Health)
	}
}

// TestTRTSidecarsGetDistinctMachineIDs: TensorRT-LLM request ids are Snowflakes; sidecars
// sharing context workers with one machine id collide within a millisecond.
func TestTRTSidecarsGetDistinctMachineIDs(t *testing.T) {
	plan := planFor(t, `name: t
eppConfig: epp.yaml
pods:
- {name: p, role: prefill, roleset: a, engine: trtllm, count: 2}
- {name: d, role: decode, roleset: a, engine: trtllm, count: 2, trtScheduleStyle: generation_first}
- {name: c, role: combined, engine: trtllm}
`, PlanOptions{Subnet: "127.0.43", BinDir: "/bin-dir"})
	seen := map[string]string{}
	for _, p := range plan.Procs("/run/endpoints.yaml") {
		if !strings.HasPrefix(p.Name, "sidecar-") {
			continue
		}
		id := ""
		for i, a := range p.Args {
			if a == "--trt-machine-id" && i+1 < len(p.Args) {
				id = p.Args[i+1]
			}
		}
		if id == "" {
			t.Fatalf("%s has no --trt-machine-id: %v", p.Name, p.Args)
		}
		if other, dup := seen[id]; dup {
			t.Fatalf("%s and %s share machine id %s", other, p.Name, id)
		}
		seen[id] = p.Name
	}
	if len(seen) != 3 {
		t.Fatalf("trtllm sidecars %v, want 3", seen)
	}
}

func TestClassify(t *testing.T) {
	plan := testPlan(t)
	tests := []struct {
		decision string
		want     string
		legs     string
	}{
		{"decode=d-0;prefill=p-0;prefill-reason=uncached 900 >= 256", "prefill-decode", "d-0/decode p-0/prefill"},
		{"decode=d-1;prefill-skipped=cached", "decode-only", "d-1/decode"},
		{"decode=c-0", "combined", "c-0/decode"},
		{"decode=d-0;encode=e-0", "encode-decode", "d-0/decode e-0/encode"},
		{"decode=d-0;encode=e-0;prefill=p-0", "encode-prefill-decode", "d-0/decode e-0/encode p-0/prefill"},
		{"decode=127.0.42.11:8001;prefill=127.0.42.10:8000", "prefill-decode", "d-0/decode p-0/prefill"},
		{"primary=d-0;p=p-0", "prefill-decode", "d-0/decode p-0/prefill"},
		{"decode=ghost", "unknown", ""},
		{"", "unknown", ""},
	}
	for _, tt := range tests {
		t.Run(tt.decision, func(t *testing.T) {
			kind, legs := plan.Classify(tt.decision)
			var parts []string
			for _, l := range legs {
				parts = append(parts, l.Pod+"/"+l.Stage)
			}
			if kind != tt.want || strings.Join(parts, " ") != tt.legs {
				t.Fatalf("Classify(%q) = %s %v, want %s %s", tt.decision, kind, parts, tt.want, tt.legs)
			}
		})
	}
}

func TestNewPlanRejectsNonLoopbackSubnet(t *testing.T) {
	plan := testPlan(t)
	if _, err := NewPlan(plan.Topology, PlanOptions{Subnet: "10.0.0"}); err == nil || !strings.Contains(err.Error(), "--subnet") {
		t.Fatalf("got %v", err)
	}
}

func TestCheckPortsNamesTheBusyAddress(t *testing.T) {
	plan := testPlan(t)
	if err := plan.CheckPorts(); err != nil {
		t.Fatalf("free lab: %v", err)
	}
	ln, err := net.Listen("tcp", plan.Pods[1].Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	err = plan.CheckPorts()
	if err == nil || !strings.Contains(err.Error(), "port in use: "+plan.Pods[1].Endpoint()) {
		t.Fatalf("got %v", err)
	}
}

func FuzzParseTopology(f *testing.F) {
	f.Add("name: t\neppConfig: x\npods:\n- {name: c, role: combined, count: 2, buckets: {min: 1, max: 2}}\n")
	f.Add("pods: [{name: p, role: prefill}]")
	f.Fuzz(func(t *testing.T, s string) {
		topo, err := ParseTopology([]byte(s), t.TempDir())
		if err != nil {
			return
		}
		// Anything accepted must lay out without error.
		if _, err := NewPlan(topo, PlanOptions{Subnet: "127.0.88", Dir: t.TempDir()}); err != nil {
			t.Fatalf("accepted topology does not plan: %v", err)
		}
	})
}
