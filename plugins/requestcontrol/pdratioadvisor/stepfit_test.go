package pdratioadvisor

import (
	"fmt"
	"testing"
	"time"
)

// TestStepFitNoBatchMeets: a window whose step fit leaves no batch within the TPOT budget (its
// step at one sequence already past it, as a fit through two workloads' pairs can be) does not
// size the decode tier: the last usable fit stands, or, with none yet, the decode advice waits.
func TestStepFitNoBatchMeets(t *testing.T) {
	steady := Observation{Requests: 500, Arrivals: 500, PromptRate: 9000, PrefillRate: 10000, MeanPrompt: 1000, MeanOutput: 50,
		OutputRate: 500, Step: StepFit{PerSeq: 0.004}, MaxBatch: 5}
	// 500 output tok/s: at 0.004 s per sequence a pod runs 10 sequences in 40 ms (250 tok/s): 2
	// pods; at 0.008, 5 in 40 ms (125 tok/s): 4 pods
	steeper, mixed := steady, steady
	steeper.Step = StepFit{PerSeq: 0.008}
	// 40.7 ms at one sequence, past the 40 ms budget
	mixed.Step, mixed.MaxBatch = StepFit{Base: 0.0407, PerSeq: 2.5e-6}, 250
	for _, tc := range []struct {
		name   string
		obs    []Observation
		decode string // replicas/reason after the last
	}{
		{name: "a usable fit sizes the tier", obs: []Observation{steady}, decode: "2/steady"},
		{name: "a later usable fit replaces it", obs: []Observation{steady, steeper}, decode: "4/decode_bound"},
		{name: "a fit no batch meets keeps the last usable one", obs: []Observation{steady, mixed}, decode: "2/steady"},
		{name: "with no usable fit before, the decode advice waits", obs: []Observation{mixed}, decode: "2/no_data"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New("adv", DefaultParameters())
			now := time.Unix(0, 0)
			a.UseClock(func() time.Time { return now })
			a.current = map[string]int{RolePrefill: 2, RoleDecode: 2}
			var got string
			for i, o := range tc.obs {
				now = now.Add(time.Duration(60+10*i) * time.Second)
				for _, adv := range a.advise(now, o) {
					if adv.Role == RoleDecode {
						got = fmt.Sprintf("%d/%s", adv.Replicas, adv.Reason)
					}
				}
			}
			if got != tc.decode {
				t.Fatalf("decode advice %s, want %s", got, tc.decode)
			}
		})
	}
}
