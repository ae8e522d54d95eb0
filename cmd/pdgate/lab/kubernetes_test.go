package lab

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func kubePlan(t *testing.T) *Plan {
	t.Helper()
	return planFor(t, `name: t
eppConfig: epp.yaml
eppArgs: ["--v=2"]
pods:
- {name: p, role: prefill, roleset: a, engine: vllm}
- {name: d, role: decode, roleset: a, engine: vllm}
- {name: c, role: combined, engine: vllm}
- {name: e, role: encode, engine: vllm}
`, PlanOptions{Subnet: "127.0.43", BinDir: "/bin-dir", Kubernetes: true})
}

// Every pod's EPP endpoint is on the pool's one target port; decode-capable engines move
// behind their sidecar.
func TestKubernetesLayout(t *testing.T) {
	plan := kubePlan(t)
	tests := []struct{ pod, engine, endpoint, portLabel string }{
		{"p-0", "127.0.43.10:8000", "127.0.43.10:8000", "8000"},
		{"d-0", "127.0.43.11:8200", "127.0.43.11:8000", "8200"},
		{"c-0", "127.0.43.12:8200", "127.0.43.12:8000", "8200"},
		{"e-0", "127.0.43.13:8000", "127.0.43.13:8000", "8000"},
	}
	for _, tc := range tests {
		t.Run(tc.pod, func(t *testing.T) {
			pod := plan.PodByName(tc.pod)
			if pod == nil {
				t.Fatal("no pod")
			}
			if pod.EngineAddr() != tc.engine || pod.Endpoint() != tc.endpoint {
				t.Errorf("engine %s endpoint %s, want %s %s", pod.EngineAddr(), pod.Endpoint(), tc.engine, tc.endpoint)
			}
			if got := plan.Labels(*pod)["model.aibrix.ai/port"]; got != tc.portLabel {
				t.Errorf("model.aibrix.ai/port %q, want %q", got, tc.portLabel)
			}
		})
	}
	for _, spec := range plan.kubeProcs("/run/kubeconfig") {
		switch {
		case spec.Name == "sim-d-0" && !hasPair(spec.Args, "--port", "8200"):
			t.Errorf("decode simulator not on its engine port: %v", spec.Args)
		case spec.Name == "sidecar-d-0" && (!hasPair(spec.Args, "--listen", "127.0.43.11:8000") || !hasPair(spec.Args, "--engine-url", "http://127.0.43.11:8200")):
			t.Errorf("decode sidecar: %v", spec.Args)
		case strings.HasPrefix(spec.Name, "sidecar-") && (slices.Contains(spec.Args, "--allowlist") ||
			!hasPair(spec.Args, "--inference-pool", "default/"+PoolName) || !hasPair(spec.Args, "--kubeconfig", "/run/kubeconfig")):
			t.Errorf("%s allow-list does not follow the pool: %v", spec.Name, spec.Args)
		}
	}
}

func TestKubernetesNamesResolve(t *testing.T) {
	plan := kubePlan(t)
	tests := []struct{ name, want string }{
		{"d-0-rank-0", "d-0"},
		{"p-0-rank-3", "p-0"},
		{"d-0", "d-0"},
		{"127.0.43.11:8000", "d-0"},
		{"d-0-rank-x", ""},
		{"nope-rank-0", ""},
	}
	for _, tc := range tests {
		got := ""
		if pod := plan.PodByName(tc.name); pod != nil {
			got = pod.Name
		}
		if got != tc.want {
			t.Errorf("PodByName(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if typ, _ := plan.Classify("decode=d-0-rank-0;prefill=p-0-rank-0"); typ != "prefill-decode" {
		t.Errorf("Kubernetes-mode decision classified %q", typ)
	}
}

func TestInferencePoolSelectsEveryPod(t *testing.T) {
	plan := kubePlan(t)
	pool := plan.InferencePool()
	sel, _, _ := unstructured.NestedStringMap(pool.Object, "spec", "selector", "matchLabels")
	ports, _, _ := unstructured.NestedSlice(pool.Object, "spec", "targetPorts")
	if len(ports) != 1 || ports[0].(map[string]any)["number"] != int64(EnginePort) {
		t.Errorf("targetPorts %v, want one: %d", ports, EnginePort)
	}
	if n, _, _ := unstructured.NestedInt64(pool.Object, "spec", "endpointPickerRef", "port", "number"); n != int64(plan.EPPGRPCPort) {
		t.Errorf("endpointPickerRef port %d, want the EPP's %d", n, plan.EPPGRPCPort)
	}
	pods := plan.KubePods()
	if len(pods) != len(plan.Pods) {
		t.Fatalf("%d pod objects for %d pods", len(pods), len(plan.Pods))
	}
	for i, pod := range pods {
		if !labels.SelectorFromSet(sel).Matches(labels.Set(pod.Labels)) {
			t.Errorf("pool selector %v misses pod %s %v", sel, pod.Name, pod.Labels)
		}
		if pod.Status.PodIP != plan.Pods[i].IP || pod.Status.Phase != corev1.PodRunning || !ready(pod) {
			t.Errorf("pod %s status %+v", pod.Name, pod.Status)
		}
	}
	if pods[1].Labels["llm-d.ai/role"] != "decode" || len(pods[1].Spec.Containers) != 2 || len(pods[0].Spec.Containers) != 1 {
		t.Errorf("decode pod %v containers %d, prefill containers %d", pods[1].Labels, len(pods[1].Spec.Containers), len(pods[0].Spec.Containers))
	}
}

func TestKubernetesEPPArgs(t *testing.T) {
	plan := kubePlan(t)
	var epp *ProcSpec
	procs := plan.kubeProcs("/run/kubeconfig")
	for i := range procs {
		if procs[i].Name == "epp" {
			epp = &procs[i]
		}
	}
	if epp == nil {
		t.Fatal("no epp process")
	}
	for _, pair := range [][2]string{{"--pool-name", PoolName}, {"--pool-namespace", Namespace}} {
		if !hasPair(epp.Args, pair[0], pair[1]) {
			t.Errorf("epp args %v lack %s %s", epp.Args, pair[0], pair[1])
		}
	}
	if slices.Contains(epp.Args, "--endpoints-file") || !slices.Contains(epp.Args, "--v=2") || !slices.Contains(epp.Args, "--allow-decision-trace=true") ||
		!slices.Contains(epp.Args, "--prefill-release-address="+plan.PrefillReleaseAddress()) {
		t.Errorf("epp args %v", epp.Args)
	}
	if !slices.Contains(epp.Env, "KUBECONFIG=/run/kubeconfig") {
		t.Errorf("epp env %v", epp.Env)
	}
}

func TestCheckKubeFiles(t *testing.T) {
	assets, crds := t.TempDir(), t.TempDir()
	tests := []struct {
		name  string
		files []string
		want  string
	}{
		{"nothing", nil, "no kube-apiserver"},
		{"no etcd", []string{"kube-apiserver"}, "no etcd"},
		{"no CRD", []string{"kube-apiserver", "etcd"}, "InferencePool CRD not found"},
		{"all", []string{"kube-apiserver", "etcd", "crd"}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, f := range tc.files {
				path := filepath.Join(assets, f)
				if f == "crd" {
					path = filepath.Join(crds, "inference.networking.k8s.io_inferencepools.yaml")
				}
				if err := os.WriteFile(path, nil, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			err := checkKubeFiles(assets, crds)
			plugintest.WantErr(t, err, tc.want)
		})
	}
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func hasPair(args []string, flag, value string) bool {
	for i := 0; i+1 < len(args); i++ {
		if args[i] == flag && args[i+1] == value {
			return true
		}
	}
	return false
}

// SGLang sidecars check the prefill pod's bootstrap listener, which is not a pool port: they
// keep the static allow-list.
func TestKubernetesSGLangSidecarKeepsStaticAllowlist(t *testing.T) {
	plan := planFor(t, `name: t
eppConfig: epp.yaml
pods:
- {name: p, role: prefill, roleset: a, engine: sglang}
- {name: d, role: decode, roleset: a, engine: sglang}
`, PlanOptions{Subnet: "127.0.44", BinDir: "/b", Kubernetes: true})
	for _, spec := range plan.kubeProcs("/run/kubeconfig") {
		if spec.Name == "sidecar-d-0" && (!slices.Contains(spec.Args, "--allowlist") || slices.Contains(spec.Args, "--inference-pool")) {
			t.Errorf("SGLang sidecar args %v", spec.Args)
		}
	}
}
