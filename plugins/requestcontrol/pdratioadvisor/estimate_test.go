package pdratioadvisor

import (
	"math"
	"testing"
	"time"
)

func TestEstimate(t *testing.T) {
	p := DefaultParameters() // TTFT 1 s, TPOT 50 ms, headroom 0.8, utilisation 0.3..0.8
	step := StepFit{Base: 0.010, PerSeq: 0.0002}
	tests := []struct {
		name        string
		o           Observation
		prefill     int
		decode      int
		decodeBatch float64
	}{
		{name: "nothing measured"},
		{name: "prefill at the utilisation cap: S = 0.1 s, h = 9",
			o:       Observation{PromptRate: 20000, PrefillRate: 10000, MeanPrompt: 1000},
			prefill: 3}, // 20000 / (0.8 × 10000) = 2.5
		{name: "tight TTFT budget after the transfer: h = 1, rho = 2/3",
			o:       Observation{PromptRate: 40000, PrefillRate: 10000, MeanPrompt: 1000, Transfer: 800 * time.Millisecond},
			prefill: 6},
		{name: "budget spent unloaded: the utilisation floor",
			o:       Observation{PromptRate: 20000, PrefillRate: 10000, MeanPrompt: 1000, Transfer: 950 * time.Millisecond},
			prefill: 7}, // 20000 / (0.3 × 10000) = 6.7
		{name: "decode at the TPOT line: B = (0.04 - 0.01) / 0.0002 = 150",
			o:      Observation{OutputRate: 10000, Step: step, MaxBatch: 100, MeanPrompt: 1000, MeanOutput: 200},
			decode: 3, decodeBatch: 150}, // 150 / 0.04 = 3750 tok/s per pod
		{name: "decode bounded by the KV cache",
			o:      Observation{OutputRate: 10000, Step: step, MaxBatch: 100, MeanPrompt: 1000, MeanOutput: 200, KVTokens: 100000},
			decode: 4, decodeBatch: 63}, // 0.7 × 100000 / 1100; 63 / 0.0226 = 2788 tok/s per pod
		// a window across a change of mix: the arrivals bring 13,000-token prompts, the
		// outputs are of requests with 1,000-token ones; paired with the arrivals' prompts the
		// KV bound would be 5 and the need 22 pods
		{name: "the KV bound pairs the outputs with their own prompts",
			o:      Observation{OutputRate: 10000, Step: step, MaxBatch: 100, MeanPrompt: 13000, CompletedPrompt: 1000, MeanOutput: 200, KVTokens: 100000},
			decode: 4, decodeBatch: 63},
		{name: "decode bounded by twice the batch seen",
			o:      Observation{OutputRate: 10000, Step: step, MaxBatch: 10},
			decode: 7, decodeBatch: 20}, // 20 / 0.014 = 1428.6 tok/s per pod
		{name: "the requests decoding now need more pods than the rate says",
			o:      Observation{OutputRate: 10000, DecodeInflight: 1000, Step: step, MaxBatch: 100},
			decode: 7, decodeBatch: 150}, // 1000 / 150 = 6.7
		{name: "TPOT missed even at batch 1: one sequence per pod",
			o:      Observation{OutputRate: 100, Step: StepFit{Base: 0.06, PerSeq: 0.001}},
			decode: 7, decodeBatch: 1}, // 1 / 0.061 = 16.4 tok/s per pod
		{name: "both tiers",
			o: Observation{PromptRate: 20000, PrefillRate: 10000, MeanPrompt: 1000, MeanOutput: 200,
				OutputRate: 10000, Step: step, MaxBatch: 100},
			prefill: 3, decode: 3, decodeBatch: 150},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Estimate(tc.o, p)
			if got.Prefill != tc.prefill || got.Decode != tc.decode || got.DecodeBatch != tc.decodeBatch {
				t.Fatalf("Estimate = %+v, want prefill %d, decode %d at batch %v", got, tc.prefill, tc.decode, tc.decodeBatch)
			}
		})
	}
}

func TestStepFit(t *testing.T) {
	line := func(xs ...float64) fitSums {
		var s fitSums
		for _, x := range xs {
			s.add(x, 0.01+0.0002*x)
		}
		return s
	}
	tests := []struct {
		name string
		s    fitSums
		want StepFit
	}{
		{name: "empty"},
		{name: "spread batches recover the line", s: line(2, 10, 40, 80), want: StepFit{Base: 0.01, PerSeq: 0.0002}},
		{name: "one batch size: proportional through the mean pair", s: line(10, 10, 10), want: StepFit{PerSeq: 0.012 / 10}},
		{name: "two pairs are not enough for a line", s: line(10, 20), want: StepFit{PerSeq: (0.012 + 0.014) / 30}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.s.fit()
			if math.Abs(got.Base-tc.want.Base) > 1e-9 || math.Abs(got.PerSeq-tc.want.PerSeq) > 1e-9 {
				t.Fatalf("fit = %+v, want %+v", got, tc.want)
			}
		})
	}
}
