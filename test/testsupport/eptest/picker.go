package eptest

import (
	"fmt"
	"math/rand/v2"
	"slices"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// Scored builds the scored endpoints a picker receives: default/pod0, default/pod1, … with
// the given scores, in that order.
func Scored(scores ...float64) []*fwksched.ScoredEndpoint {
	out := make([]*fwksched.ScoredEndpoint, len(scores))
	for i, s := range scores {
		ep := Scheduling(Spec{Namespace: "default", Name: fmt.Sprintf("pod%d", i), NoMetrics: true})
		out[i] = &fwksched.ScoredEndpoint{Endpoint: ep, Score: s}
	}
	return out
}

// Names are a profile result's target endpoint names, in order.
func Names(r *fwksched.ProfileRunResult) []string {
	out := make([]string, len(r.TargetEndpoints))
	for i, e := range r.TargetEndpoints {
		out[i] = e.GetMetadata().NamespacedName.Name
	}
	return out
}

// Shuffled is a copy of eps in a random order, as GIE's scheduler hands them to a picker (it
// builds the list from a map).
func Shuffled(eps []*fwksched.ScoredEndpoint, r *rand.Rand) []*fwksched.ScoredEndpoint {
	out := slices.Clone(eps)
	r.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
