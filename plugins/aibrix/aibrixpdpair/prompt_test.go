package aibrixpdpair

import (
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/aibrix/internal/prefillpolicy"
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
