package chart

import (
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	sidecarapp "github.com/pdgate/pdgate/cmd/sidecar/app"
)

// TestTRTDecodeSidecarsGetDistinctMachineIDs: TensorRT-LLM request ids carry the decode
// sidecar's machine id, so two decode sidecars that can share a context worker must never
// have the same one. The chart renders decode-capable pods as StatefulSets with disjoint id
// ranges; every pod of every set (named as the StatefulSet controller names them, the name
// reaching the sidecar through the downward API) parses the rendered args with the
// sidecar's own flag set and validation, and the ids in effect are all distinct. A pod past
// its set's range (a manual scale-up) is refused instead of taking another set's id.
func TestTRTDecodeSidecarsGetDistinctMachineIDs(t *testing.T) {
	tests := []struct {
		name string
		sets []string
		pods int // decode-capable pods in all
	}{
		{name: "three decode replicas", pods: 3, sets: []string{"modelServers.rolesets[0].name=g0",
			"modelServers.rolesets[0].prefillReplicas=1", "modelServers.rolesets[0].decodeReplicas=3"}},
		{name: "two rolesets and combined pods, generation_first", pods: 3 + 2 + 2, sets: []string{
			"modelServers.trtllm.scheduleStyle=generation_first",
			"modelServers.rolesets[0].name=g0", "modelServers.rolesets[0].prefillReplicas=1", "modelServers.rolesets[0].decodeReplicas=3",
			"modelServers.rolesets[1].name=g1", "modelServers.rolesets[1].prefillReplicas=2", "modelServers.rolesets[1].decodeReplicas=2",
			"modelServers.combined.replicas=2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			vals := values(t, nil, append([]string{"inferencePool.modelServers.matchLabels.app=x", "modelServers.enabled=true",
				"modelServers.engine=trtllm", "inferencePool.modelServerType=trtllm-serve"}, tc.sets...)...)
			objs := mustRender(t, "rel", testNS, vals)
			owner := map[int]string{}
			for _, d := range ofKind(objs, "Deployment") {
				if role, _, _ := unstructured.NestedString(d.Object, "spec", "template", "metadata", "labels", "role-name"); role != "" && role != "prefill" {
					t.Errorf("Deployment %s runs %s pods: TRT-LLM decode-capable pods must be StatefulSet pods to have an ordinal", d.GetName(), role)
				}
			}
			for _, s := range ofKind(objs, "StatefulSet") {
				replicas := toInt(field(t, s, "spec", "replicas"))
				if field(t, s, "spec", "podManagementPolicy") != "Parallel" || field(t, s, "spec", "serviceName") == "" {
					t.Errorf("%s: want podManagementPolicy Parallel and a serviceName", s.GetName())
				}
				sc := container(t, s, "initContainers", "pdgate-sidecar")
				if !podNameFromDownwardAPI(sc) {
					t.Errorf("%s: the sidecar gets no POD_NAME from metadata.name", s.GetName())
				}
				args := stringList(sc["args"])
				// Pods as the StatefulSet controller names them, and one past the set's size.
				for k := 0; k <= replicas; k++ {
					pod := fmt.Sprintf("%s-%d", s.GetName(), k)
					id, err := sidecarMachineID(t, args, pod)
					if k == replicas {
						if err == nil || !strings.Contains(err.Error(), "outside") {
							t.Errorf("%s (past the set's %d replicas): err %v, want it refused", pod, replicas, err)
						}
						continue
					}
					if err != nil {
						t.Errorf("%s: the sidecar refuses the chart's args %q: %v", pod, args, err)
						continue
					}
					if other, dup := owner[id]; dup {
						t.Errorf("%s and %s share TRT-LLM machine id %d", other, pod, id)
					}
					owner[id] = pod
				}
			}
			if len(owner) != tc.pods {
				t.Errorf("%d decode sidecars with a machine id, want %d: %v", len(owner), tc.pods, owner)
			}
		})
	}
}

// The chart owns the machine-id flags with TRT-LLM, and refuses more sidecars than ids.
func TestTRTMachineIDValuesRefused(t *testing.T) {
	base := []string{"inferencePool.modelServers.matchLabels.app=x", "modelServers.enabled=true", "modelServers.engine=trtllm"}
	for _, tc := range []struct {
		set, want string
	}{
		{"sidecar.flags.trt-machine-id=3", "sidecar.flags.trt-machine-id:"},
		{"sidecar.flags.trt-machine-id-slots=3", "sidecar.flags.trt-machine-id-slots:"},
		{"modelServers.combined.replicas=1024", "1025 decode and combined replicas"},
	} {
		if _, err := render(t, "rel", testNS, values(t, nil, append(base, tc.set)...)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.set, err, tc.want)
		}
	}
	// Other engines keep Deployments and take the flag as given.
	objs := mustRender(t, "rel", testNS, values(t, nil, "inferencePool.modelServers.matchLabels.app=x", "modelServers.enabled=true",
		"modelServers.engine=vllm", "modelServers.combined.replicas=2"))
	if n := len(ofKind(objs, "StatefulSet")); n != 0 {
		t.Errorf("vllm renders %d StatefulSets, want 0", n)
	}
}

// sidecarMachineID runs the sidecar's own flag parsing and validation on args, with pod's
// name where the downward API puts it, and returns the machine id in effect.
func sidecarMachineID(t *testing.T, args []string, pod string) (int, error) {
	t.Helper()
	t.Setenv("POD_NAME", pod)
	t.Setenv("AIBRIX_TRT_MACHINE_ID", "")
	o := sidecarapp.NewOptions()
	o.Logger = logr.Discard()
	fs := flag.NewFlagSet("sidecar", flag.ContinueOnError)
	o.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 0, fmt.Errorf("parse: %w", err)
	}
	if err := o.Validate(); err != nil {
		return 0, err
	}
	return o.TRTMachineIDInEffect(), nil
}

func podNameFromDownwardAPI(c map[string]any) bool {
	env, _ := c["env"].([]any)
	for _, e := range env {
		m := e.(map[string]any)
		if m["name"] != "POD_NAME" {
			continue
		}
		ref, _ := m["valueFrom"].(map[string]any)["fieldRef"].(map[string]any)
		return ref["fieldPath"] == "metadata.name"
	}
	return false
}
