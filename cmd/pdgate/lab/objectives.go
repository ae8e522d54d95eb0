package lab

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Objective is an InferenceObjective the lab creates in Kubernetes mode (a request names it in
// x-gateway-inference-objective; its priority decides whether admission may shed it: < 0 is
// sheddable). The standalone EPP has no objectives source, so every request there has
// priority 0 and GIE's legacy admission never sheds.
type Objective struct {
	Name     string `json:"name"`
	Priority int    `json:"priority"`
}

// objectiveHeader names a request's InferenceObjective (GIE's metadata.ObjectiveKey).
const objectiveHeader = "x-gateway-inference-objective"

var objectiveGVR = schema.GroupVersionResource{Group: "inference.networking.x-k8s.io", Version: "v1alpha2", Resource: "inferenceobjectives"}

func validObjectives(objs []Objective) []error {
	var errs []error
	seen := map[string]bool{}
	for i, o := range objs {
		if o.Name == "" || seen[o.Name] {
			errs = append(errs, fmt.Errorf("objectives[%d].name: required and unique", i))
		}
		seen[o.Name] = true
	}
	return errs
}

// InferenceObjectives are the topology's objectives as API objects bound to the lab's pool.
func (p *Plan) InferenceObjectives() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range p.Topology.Objectives {
		out = append(out, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": objectiveGVR.GroupVersion().String(), "kind": "InferenceObjective",
			"metadata": map[string]any{"name": o.Name, "namespace": Namespace},
			"spec": map[string]any{
				"priority": int64(o.Priority),
				"poolRef":  map[string]any{"name": PoolName},
			},
		}})
	}
	return out
}
