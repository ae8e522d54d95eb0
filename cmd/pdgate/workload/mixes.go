package workload

import "math/rand"

// Mix is a synthetic traffic class whose prompt and output lengths are uniform in their
// ranges: the classes a fleet's demand shifts between over a day, each loading prefill and
// decode in its own proportion.
type Mix struct {
	Kind                 string
	PromptMin, PromptMax int
	OutMin, OutMax       int
}

// The mixes of the shifting workload (`pdgate bench sim advisor`) besides the two traces.
var (
	// Code is code completion and editing over a repository's context: long prompts, short
	// outputs (prefill-heavy).
	Code = Mix{Kind: "code", PromptMin: 3000, PromptMax: 12000, OutMin: 16, OutMax: 160}
	// Reasoning is a short question answered after a long chain of thought (decode-heavy).
	Reasoning = Mix{Kind: "reasoning", PromptMin: 200, PromptMax: 1500, OutMin: 1000, OutMax: 4000}
)

// Sample draws one request's prompt and output lengths.
func (m Mix) Sample(rng *rand.Rand) (prompt, output int) {
	return m.PromptMin + rng.Intn(m.PromptMax-m.PromptMin+1), m.OutMin + rng.Intn(m.OutMax-m.OutMin+1)
}

// Means are the mean prompt and output lengths.
func (m Mix) Means() (prompt, output float64) {
	return float64(m.PromptMin+m.PromptMax) / 2, float64(m.OutMin+m.OutMax) / 2
}

// Generator yields the mix as chat requests of seeded filler, for the lab and the benches
// that send requests.
func (m Mix) Generator(o Options) Generator {
	if o.Model == "" {
		o.Model = "meta-llama/Llama-3.1-8B-Instruct"
	}
	return &synthetic{o: o, rng: rand.New(rand.NewSource(o.Seed)), kind: m.Kind,
		minTok: m.PromptMin, maxTok: m.PromptMax, outMin: m.OutMin, outMax: m.OutMax}
}
