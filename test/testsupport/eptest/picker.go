package eptest

import (
	"context"
	"fmt"
	"math"
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

// RateCase is one row of a random picker's frequency table: built to return at most Max
// endpoints and handed candidates pod0, pod1, … scoring Scores, the picker must choose pod i
// in Want[i] of its picks.
type RateCase struct {
	Name   string
	Max    int
	Scores []float64
	Want   []float64
}

// RateTolerance is how far a measured pick rate may stray from a probability strictly between
// 0 and 1; a certain pick (0 or 1) must be exact.
const RateTolerance = 0.02

// CheckPickRates runs each case as a subtest: n picks by newPicker(c.Max), whose rates must
// match c.Want (RatesMatch). Every pick must return as many endpoints as the shares add up to,
// since each pick chooses that many distinct candidates. With a seeded picker the rates are
// fixed, so the check cannot flake.
func CheckPickRates(t *testing.T, n int, newPicker func(max int) fwksched.Picker, cases []RateCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			total := 0.0
			for _, w := range c.Want {
				total += w
			}
			rates := PickRates(t, newPicker(c.Max), c.Scores, n, int(math.Round(total)))
			if err := RatesMatch(rates, c.Want); err != nil {
				t.Error(err)
			}
		})
	}
}

// RatesMatch reports the first pod whose measured rate is off its wanted probability by more
// than RateTolerance, or at all when the probability is 0 or 1.
func RatesMatch(rates, want []float64) error {
	if len(rates) != len(want) {
		return fmt.Errorf("%d rates, want %d", len(rates), len(want))
	}
	for i, got := range rates {
		w, tol := want[i], RateTolerance
		if w == 0 || w == 1 {
			tol = 0
		}
		if got < w-tol || got > w+tol {
			return fmt.Errorf("pod%d: picked in %.4f of runs, want %.4f ± %.2f", i, got, w, tol)
		}
	}
	return nil
}
