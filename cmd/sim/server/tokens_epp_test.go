package server

import (
	"encoding/json"
	"slices"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/tokenestimate"
)

// TestTokensMatchEPPEstimate: the token ids the simulator caches (and reports in KV events)
// for a request are the ids the EPP's token producer estimates for it, so the precise prefix
// index's block keys match the engine's blocks (chat requests once never matched).
func TestTokensMatchEPPEstimate(t *testing.T) {
	chats := []string{
		`{"model":"m","messages":[{"role":"user","content":"hello"}]}`,
		`{"model":"m","messages":[{"role":"system","content":"You are a helpful assistant. Answer briefly."},{"role":"user","content":"what is a KV cache?"},{"role":"assistant","content":"A store of attention keys."},{"role":"user","content":"and prefix caching?"}]}`,
		`{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":[{"type":"text","text":"part one, "},{"type":"text","text":"part two"}]}]}`,
		`{"model":"m","tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],"messages":[{"role":"user","content":"weather in Paris?"}]}`,
		`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","content":null},{"role":"user","content":"abcdefg"}]}`,
	}
	for i, body := range chats {
		r, err := parseRequest(apiChat, []byte(body), 16)
		if err != nil {
			t.Fatalf("chat %d: %v", i, err)
		}
		var cc fwksched.ChatCompletionsRequest
		if err := json.Unmarshal([]byte(body), &cc); err != nil {
			t.Fatalf("chat %d: GIE body: %v", i, err)
		}
		est := tokenestimate.Estimate(&fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{ChatCompletions: &cc}}, tokenestimate.EstimateParams{})
		if est == nil || !slices.Equal(r.tokens, est.TokenIDs) {
			t.Errorf("chat %d: simulator tokens %v, EPP estimate %v", i, r.tokens, est)
		}
	}
	prompt := `The quick brown fox jumps over the lazy dog, twice: the quick brown fox.`
	r, err := parseRequest(apiCompletions, []byte(`{"model":"m","prompt":`+mustJSON(prompt)+`}`), 16)
	if err != nil {
		t.Fatal(err)
	}
	est := tokenestimate.Estimate(&fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: prompt}}}}, tokenestimate.EstimateParams{})
	if !slices.Equal(r.tokens, est.TokenIDs) {
		t.Errorf("completion: simulator tokens %v, EPP estimate %v", r.tokens, est.TokenIDs)
	}
}

func mustJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
