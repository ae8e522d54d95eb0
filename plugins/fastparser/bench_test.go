package fastparser

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	fwkrh "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requesthandling"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/openai"
)

// chatBody builds a chat request of about n bytes (a system prompt, a user turn).
func chatBody(n int) []byte {
	return []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":128,"stream":true,"messages":[{"role":"system","content":"` +
		bigText(n) + `"},{"role":"user","content":"Summarise the document."}]}`)
}

// parseAndRepackage is the request-side work GIE's director does with a parser: parse, read
// and rewrite the model of a PayloadMap, marshal it back.
func parseAndRepackage(p fwkrh.Parser, body []byte, h map[string]string) error {
	pb, err := p.ParseRequest(context.Background(), body, h)
	if err != nil {
		return err
	}
	if m, ok := pb.Payload.(fwksched.PayloadMap); ok {
		m["model"] = m["model"].(string)
		if _, err := json.Marshal(m); err != nil {
			return err
		}
	}
	_ = pb.PromptText()
	return nil
}

// BenchmarkParse compares GIE's openai-parser (the baseline) with both modes of this parser
// on the same bodies, and prints the ratio of ns/op to the baseline measured in the same run.
func BenchmarkParse(b *testing.B) {
	h := map[string]string{":path": "/v1/chat/completions"}
	parsers := []struct {
		name string
		p    fwkrh.Parser
	}{
		{"gie-openai", openai.NewOpenAIParser()},
		{"fast-map", New("", Params{Payload: ModeMap})},
		{"fast-raw", New("", Params{Payload: ModeRaw})},
	}
	for _, size := range []int{1 << 10, 16 << 10, 220 << 10} {
		body := chatBody(size)
		var base float64
		for _, pp := range parsers {
			var r testing.BenchmarkResult
			b.Run(fmt.Sprintf("%dKB/%s", size>>10, pp.name), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if err := parseAndRepackage(pp.p, body, h); err != nil {
						b.Fatal(err)
					}
				}
				r = testing.BenchmarkResult{N: b.N, T: b.Elapsed()}
			})
			if r.N == 0 {
				continue
			}
			ns := float64(r.T.Nanoseconds()) / float64(r.N)
			if pp.name == "gie-openai" {
				base = ns
			} else if base > 0 {
				b.Logf("%dKB %s: %.0f ns/op, %.2fx faster than gie-openai", size>>10, pp.name, ns, base/ns)
			}
		}
	}
}
