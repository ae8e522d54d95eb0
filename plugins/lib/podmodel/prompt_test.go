package podmodel

import (
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

func TestPromptTextMatchesGIE(t *testing.T) {
	text := func(s string) fwksched.ContentBlock { return fwksched.ContentBlock{Type: "text", Text: s} }
	image := fwksched.ContentBlock{Type: "image_url"}
	chat := func(msgs ...fwksched.Message) *fwksched.LLMRequestBody {
		return &fwksched.LLMRequestBody{ChatCompletions: &fwksched.ChatCompletionsRequest{Messages: msgs}}
	}
	cases := []struct {
		name string
		body *fwksched.LLMRequestBody
	}{
		{"nil", nil},
		{"empty", &fwksched.LLMRequestBody{}},
		{"completions raw", &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: "héllo"}}}},
		{"completions strings", &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Strings: []string{"a", "", "bc"}}}}},
		{"chat one message", chat(fwksched.Message{Role: "user", Content: fwksched.Content{Raw: "hi there"}})},
		{"chat empty and structured", chat(
			fwksched.Message{Role: "system", Content: fwksched.Content{}},
			fwksched.Message{Role: "user", Content: fwksched.Content{Structured: []fwksched.ContentBlock{text("a"), image, text("")}}},
			fwksched.Message{Role: "user", Content: fwksched.Content{Structured: []fwksched.ContentBlock{image}}},
			fwksched.Message{Role: "assistant", Content: fwksched.Content{Raw: "東京"}})},
		{"responses", &fwksched.LLMRequestBody{Responses: &fwksched.ResponsesRequest{Input: "in"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := ""
			if tc.body != nil {
				want = tc.body.PromptText()
			}
			if got := PromptText(tc.body); got != want {
				t.Fatalf("PromptText %q, GIE %q", got, want)
			}
			if got := PromptTextLen(tc.body); got != len(want) {
				t.Fatalf("PromptTextLen %d, GIE %d", got, len(want))
			}
		})
	}
}
