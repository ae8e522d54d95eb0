package lab

import (
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/epp/endpoints"
)

func TestDataParallelLayout(t *testing.T) {
	plan := planFor(t, `name: dp
eppConfig: epp.yaml
pods:
- {name: p, role: prefill, roleset: a, dataParallelSize: 3}
- {name: d, role: decode, roleset: a, dataParallelSize: 3}
- {name: c, role: combined, dataParallelSize: 2, rankEndpoints: true}
`, PlanOptions{Subnet: "127.0.43", BinDir: "/b"})
	b, err := plan.EndpointsYAML()
	if err != nil {
		t.Fatal(err)
	}
	eps, err := endpoints.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	type ep struct {
		name          string
		port, metrics int
		rank          string
	}
	var got []ep
	for _, e := range eps {
		got = append(got, ep{e.Name, e.Port, e.MetricsPort, e.Labels[DPRankLabel]})
	}
	want := []ep{
		{"p-0-rank-0", 8000, 8000, "0"}, {"p-0-rank-1", 8001, 8001, "1"}, {"p-0-rank-2", 8002, 8002, "2"},
		{"d-0", 8000, 8200, ""}, // one endpoint: the sidecar on the primary port
		{"c-0-rank-0", 8000, 8200, "0"}, {"c-0-rank-1", 8001, 8201, "1"},
	}
	if len(got) != len(want) {
		t.Fatalf("endpoints %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("endpoint %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	// Rank endpoint names and every rank address resolve to their pod.
	for name, pod := range map[string]string{"p-0-rank-2": "p-0", "127.0.43.10:8002": "p-0", "127.0.43.11:8202": "d-0", "127.0.43.12:8001": "c-0"} {
		if p := plan.PodByName(name); p == nil || p.Name != pod {
			t.Errorf("PodByName(%s) = %v, want %s", name, p, pod)
		}
	}
	// The sidecar may call every prefill rank; simulators and sidecars get the rank count.
	if tg := plan.targets(); !strings.Contains(tg, "127.0.43.10:8002") || !strings.Contains(tg, "127.0.43.11:8202") {
		t.Errorf("allow-list %s lacks rank addresses", tg)
	}
	procs := map[string]ProcSpec{}
	for _, p := range plan.Procs("/e.yaml") {
		procs[p.Name] = p
	}
	args := func(n string) string { return strings.Join(procs[n].Args, " ") }
	if a := args("sim-d-0"); !strings.Contains(a, "--port 8200") || !strings.Contains(a, "--data-parallel-size 3") {
		t.Errorf("sim-d-0: %s", a)
	}
	if h := procs["sim-p-0"].Health; h != "http://127.0.43.10:8002/health" {
		t.Errorf("sim-p-0 health %s, want the last rank's", h)
	}
	if a := args("sidecar-d-0"); !strings.Contains(a, "--listen 127.0.43.11:8000") || !strings.Contains(a, "--engine-url http://127.0.43.11:8200") || !strings.Contains(a, "--data-parallel-size 3") {
		t.Errorf("sidecar-d-0: %s", a)
	}
	if _, err := NewPlan(plan.Topology, PlanOptions{Subnet: "127.0.43", Kubernetes: true}); err == nil {
		t.Error("Kubernetes mode accepted a data-parallel topology")
	}
}

func TestDataParallelValidation(t *testing.T) {
	for spec, want := range map[string]string{
		`{name: p, role: prefill, roleset: a, engine: sglang, dataParallelSize: 2}`:      "vllm only",
		`{name: p, role: prefill, roleset: a, dataParallelSize: 17}`:                     "1..16",
		`{name: p, role: prefill, roleset: a, dataParallelSize: 2, rankEndpoints: true}`: "rankEndpoints",
		`{name: p, role: encode, dataParallelSize: 2}`:                                   "encode",
	} {
		_, err := LoadTopology(writeTopology(t, "name: x\neppConfig: epp.yaml\npods:\n- "+spec+"\n- {name: c, role: combined}\n"))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", spec, err, want)
		}
	}
}
