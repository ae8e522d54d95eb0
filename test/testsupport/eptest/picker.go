package eptest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

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

// PickRates runs n picks over Scored(scores...), failing t unless every pick returns perPick
// endpoints, and returns for each pod (pod0, pod1, …) the share of the n picks that chose it.
// The random pickers' tests compare these rates with the probabilities they promise.
func PickRates(t testing.TB, p fwksched.Picker, scores []float64, n, perPick int) []float64 {
	t.Helper()
	index := make(map[string]int, len(scores))
	for i := range scores {
		index[fmt.Sprintf("pod%d", i)] = i
	}
	counts := make([]int, len(scores))
	for range n {
		got := Names(p.Pick(context.Background(), nil, Scored(scores...)))
		if len(got) != perPick {
			t.Fatalf("picked %v, want %d endpoints", got, perPick)
		}
		for _, g := range got {
			counts[index[g]]++
		}
	}
	rates := make([]float64, len(scores))
	for i, c := range counts {
		rates[i] = float64(c) / float64(n)
	}
	return rates
}
