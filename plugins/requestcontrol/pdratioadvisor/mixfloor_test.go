package pdratioadvisor

import (
	"testing"
	"time"
)

// TestMixFloor: a phase of one mix, then another; the advice at the end of the second. Band
// and dwell are 0, so the advice is the raw estimate (floored) at once.
//
// Engine side unless a case says otherwise: prefill 20,000 tok/s per pod, TTFT 1 s; decode step 10 ms + 0.2 ms
// per sequence, sized at B = 150 (40 ms), 3,750 tok/s per pod.
//   - heavy prompts: 10 req/s × 8,000 tokens, S = 0.4 s, h = 1.5, ρ = 0.75 → 5.3 → 6 prefill
//   - long outputs: 10 req/s × 2,000 tokens = 20,000 tok/s → 5.3 → 6 decode
//   - light requests: 1,000-token prompts (ρ = 0.8) and 100-token outputs → 1 pod each
func TestMixFloor(t *testing.T) {
	step := StepFit{Base: 0.010, PerSeq: 0.0002}
	mix := func(rate, prompt, output float64) Observation {
		return Observation{Requests: 100, Arrivals: 100, ArrivalRate: rate, PromptRate: rate * prompt, MeanPrompt: prompt,
			MeanOutput: output, OutputRate: rate * output, PrefillRate: 20000, Step: step, MaxBatch: 100}
	}
	heavy, light := mix(10, 8000, 2000), mix(10, 1000, 100)
	localHalf := func(o Observation) Observation {
		o.PromptRate, o.LocalPromptRate = o.PromptRate/2, o.PromptRate/2
		return o
	}
	slowStep := func(o Observation) Observation {
		o.Step = StepFit{Base: 0.020, PerSeq: 0.0003}
		return o
	}
	backlog := func(o Observation) Observation {
		o.DecodeInflight = 3000
		return o
	}
	tests := []struct {
		name            string
		lookback        int // seconds
		first, second   Observation
		secondFor       time.Duration
		prefill, decode int
	}{
		{name: "no look-back: the advice follows the light mix", lookback: 0,
			first: heavy, second: light, secondFor: 10 * time.Minute, prefill: 1, decode: 1},
		{name: "the heavy mix at the present rate is the floor", lookback: 3600,
			first: heavy, second: light, secondFor: 10 * time.Minute, prefill: 6, decode: 6},
		// 5 req/s: 40,000 prompt tok/s → 2.7 → 3; 10,000 output tok/s → 2.7 → 3
		{name: "the floor falls with the arrival rate", lookback: 3600,
			first: heavy, second: mix(5, 1000, 100), secondFor: 10 * time.Minute, prefill: 3, decode: 3},
		{name: "a mix older than the look-back is forgotten", lookback: 300,
			first: heavy, second: light, secondFor: 10 * time.Minute, prefill: 1, decode: 1},
		// heavy prompts with short outputs, then long outputs with short prompts: each role
		// keeps its own heaviest
		{name: "each role floors on its own heaviest", lookback: 3600,
			first: mix(10, 8000, 100), second: mix(10, 1000, 2000), secondFor: 10 * time.Minute, prefill: 6, decode: 6},
		// half the heavy prompts were prefilled on their decode pods: 5 req/s × 8,000 → 3
		{name: "prompts the heavy mix kept on its decode pods add no prefill floor", lookback: 3600,
			first: localHalf(heavy), second: light, secondFor: 10 * time.Minute, prefill: 3, decode: 6},
		// the heavy mix's decode step was longer at every batch: B = 66, 66 / 0.0398 =
		// 1,658 tok/s per pod, 20,000 / 1,658 → 13 (on the light mix's step it would be 6)
		{name: "each mix is sized on its own engine side", lookback: 3600,
			first: slowStep(heavy), second: light, secondFor: 10 * time.Minute, prefill: 6, decode: 13},
		// a backlog of 3,000 requests decoding during the heavy mix: 20 pods then, not after
		{name: "the requests decoding then are no part of the floor", lookback: 3600,
			first: backlog(heavy), second: light, secondFor: 10 * time.Minute, prefill: 6, decode: 6},
		{name: "a lighter mix before adds nothing", lookback: 3600,
			first: light, second: heavy, secondFor: 10 * time.Minute, prefill: 6, decode: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := DefaultParameters()
			p.Band, p.MinDwellSeconds, p.MixLookbackSeconds = 0, 0, tc.lookback
			a := New("adv", p)
			a.current = map[string]int{RolePrefill: 3, RoleDecode: 3}
			base := time.Unix(0, 0)
			var got map[string]int
			advise := func(at time.Duration, o Observation) {
				got = map[string]int{}
				for _, adv := range a.advise(base.Add(at), o) {
					got[adv.Role] = adv.Replicas
				}
			}
			for s := time.Duration(0); s < 10*time.Minute; s += 10 * time.Second {
				advise(s, tc.first)
			}
			for s := time.Duration(0); s <= tc.secondFor; s += 10 * time.Second {
				advise(10*time.Minute+s, tc.second)
			}
			if got[RolePrefill] != tc.prefill || got[RoleDecode] != tc.decode {
				t.Fatalf("advice prefill %d, decode %d; want %d, %d", got[RolePrefill], got[RoleDecode], tc.prefill, tc.decode)
			}
		})
	}
}
