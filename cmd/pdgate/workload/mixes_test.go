package workload

import (
	"encoding/json"
	"math/rand"
	"testing"
)

func TestMixes(t *testing.T) {
	for _, m := range []Mix{Code, Reasoning} {
		t.Run(m.Kind, func(t *testing.T) {
			rng := rand.New(rand.NewSource(1))
			var sp, so float64
			const n = 20000
			for range n {
				p, o := m.Sample(rng)
				if p < m.PromptMin || p > m.PromptMax || o < m.OutMin || o > m.OutMax {
					t.Fatalf("sample %d/%d outside the mix's ranges", p, o)
				}
				sp, so = sp+float64(p), so+float64(o)
			}
			mp, mo := m.Means()
			if d := sp/n/mp - 1; d > 0.02 || d < -0.02 {
				t.Errorf("mean prompt %.0f, Means says %.0f", sp/n, mp)
			}
			if d := so/n/mo - 1; d > 0.02 || d < -0.02 {
				t.Errorf("mean output %.0f, Means says %.0f", so/n, mo)
			}
			req, ok := m.Generator(Options{Seed: 1}).Next()
			if !ok || req.Kind != m.Kind {
				t.Fatalf("generator: %v %q", ok, req.Kind)
			}
			var body struct {
				MaxTokens int `json:"max_tokens"`
			}
			if err := json.Unmarshal(req.Body, &body); err != nil || body.MaxTokens < m.OutMin || body.MaxTokens > m.OutMax {
				t.Fatalf("body %s: max_tokens %d (%v)", req.Body[:60], body.MaxTokens, err)
			}
		})
	}
	if cp, co := Code.Means(); cp/co < 20 {
		t.Errorf("code mix is not prefill-heavy: %.0f prompt / %.0f output", cp, co)
	}
	if rp, ro := Reasoning.Means(); ro/rp < 2 {
		t.Errorf("reasoning mix is not decode-heavy: %.0f prompt / %.0f output", rp, ro)
	}
}
