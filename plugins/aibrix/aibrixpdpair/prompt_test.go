package aibrixpdpair

import (
	"fmt"
	"math"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/aibrix/internal/prefillpolicy"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// TestPromptCharsWithoutTheText: counting a body's prompt part by part gives the count of the
// text PromptText builds, for every body shape.
func TestPromptCharsWithoutTheText(t *testing.T) {
	cases := []struct {
		name string
		body *fwksched.LLMRequestBody
	}{
		{"nil body", nil},
		{"completion", &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: "café ✓ prompt"}}}},
		{"chat, plain contents", &fwksched.LLMRequestBody{ChatCompletions: &fwksched.ChatCompletionsRequest{Messages: []fwksched.Message{
			{Role: "system", Content: fwksched.Content{Raw: "You are terse. 😀"}}, {Role: "user", Content: fwksched.Content{Raw: "Explain KV caches."}}}}}},
		{"chat, structured and empty", &fwksched.LLMRequestBody{ChatCompletions: &fwksched.ChatCompletionsRequest{Messages: []fwksched.Message{
			{Role: "user", Content: fwksched.Content{Structured: []fwksched.ContentBlock{{Type: "text", Text: "look at"}, {Type: "image_url"}, {Type: "text", Text: "this é"}}}},
			{Role: "assistant"}, {Role: "user", Content: fwksched.Content{Raw: "and?"}}}}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{body: tc.body}
			want := prefillpolicy.Tokens(podmodel.PromptText(tc.body))
			if got := in.promptChars(); got != want {
				t.Fatalf("promptChars = %d, want %d", got, want)
			}
			if got := in.promptText(); got != podmodel.PromptText(tc.body) {
				t.Fatalf("promptText = %q, want %q", got, podmodel.PromptText(tc.body))
			}
		})
	}
}

// TestConductorScoresThePromptLength: conductor is the prefill policy that reads the prompt's
// length (its unmatched tokens' prefill time), so its score grows with the prompt.
func TestConductorScoresThePromptLength(t *testing.T) {
	pods, _ := mkPods(podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"})
	k := knobs(func(k *pdknobs.Knobs) {
		k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillConductor, pdknobs.DecodeLeastRequest
	})
	for _, n := range []int{0, 400, 40000} {
		t.Run(fmt.Sprint(n, " characters"), func(t *testing.T) {
			d, err := newSel(t, nil).Select(Input{RequestID: "r", Pods: pods, Knobs: k, PromptText: strings.Repeat("x", n)})
			if want := prefillpolicy.PrefillCostMs(float64(n)); err != nil || math.Abs(d.PrefillScore-want) > 1e-9 {
				t.Fatalf("prefill score %g (%v), want %g", d.PrefillScore, err, want)
			}
		})
	}
}
