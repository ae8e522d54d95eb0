package podmodel

import (
	"strings"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// PromptText is GIE's LLMRequestBody.PromptText (the same string for every body), built with
// one allocation of the final size instead of a builder that doubles its way there (a 220 KB
// chat prompt was copied five times). Callers that need only its length use PromptTextLen.
func PromptText(body *fwksched.LLMRequestBody) string {
	if body == nil {
		return ""
	}
	if body.ChatCompletions == nil || body.Completions != nil {
		return body.PromptText()
	}
	var sb strings.Builder
	sb.Grow(PromptTextLen(body))
	PromptParts(body, func(part string) { sb.WriteString(part) })
	return sb.String()
}

// PromptParts calls f with the pieces PromptText concatenates, in order and separators
// included, so that a caller needing a measure of the text (its character count) does not
// build a copy of a long prompt to take it.
func PromptParts(body *fwksched.LLMRequestBody, f func(part string)) {
	if body == nil {
		return
	}
	if body.ChatCompletions == nil || body.Completions != nil {
		f(body.PromptText())
		return
	}
	for _, msg := range body.ChatCompletions.Messages {
		if msg.Content.Raw != "" {
			f(msg.Content.Raw)
			f(" ")
			continue
		}
		if contentTextLen(msg.Content) == 0 {
			continue
		}
		for _, block := range msg.Content.Structured {
			if block.Type == "text" {
				f(block.Text)
				f(" ")
			}
		}
		f(" ")
	}
}

// PromptTextLen is len(body.PromptText()) without building the text for completions and chat
// bodies.
func PromptTextLen(body *fwksched.LLMRequestBody) int {
	switch {
	case body == nil:
		return 0
	case body.Completions != nil:
		p := body.Completions.Prompt
		if p.Raw != "" {
			return len(p.Raw)
		}
		n := 0
		for i, s := range p.Strings {
			if i > 0 {
				n++
			}
			n += len(s)
		}
		return n
	case body.ChatCompletions != nil:
		n := 0
		for _, msg := range body.ChatCompletions.Messages {
			if l := contentTextLen(msg.Content); l > 0 {
				n += l + 1
			}
		}
		return n
	default:
		return len(body.PromptText())
	}
}

// contentTextLen is len(content.PlainText()).
func contentTextLen(c fwksched.Content) int {
	if c.Raw != "" {
		return len(c.Raw)
	}
	n := 0
	for _, block := range c.Structured {
		if block.Type == "text" {
			n += len(block.Text) + 1
		}
	}
	return n
}
