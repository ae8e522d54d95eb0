package openaiparser

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwkrh "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requesthandling"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/openai"

	"github.com/pdgate/pdgate/test/testsupport"
)

// chatBody builds a chat request of about n bytes (a system prompt, a user turn).
func chatBody(n int) []byte {
	return []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":128,"stream":true,"messages":[{"role":"system","content":"` +
		bigText(n) + `"},{"role":"user","content":"Summarise the document."}]}`)
}

// blocksBody is the same request with the system prompt as a text content block, the shape
// several OpenAI SDKs send.
func blocksBody(n int) []byte {
	return []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":128,"stream":true,"messages":[{"role":"system","content":[{"type":"text","text":"` +
		bigText(n) + `"}]},{"role":"user","content":"Summarise the document."}]}`)
}

// parseAndRepackage is the request-side work GIE's director does with a parser: parse, read
// and rewrite the model of a PayloadMap, marshal it back; and the prompt text plugins hash.
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
	if pd, ok := p.(fwkrc.PrepareDataPlugin); ok {
		// The raw mode's TargetModel fill-in runs on every request too.
		if err := pd.PrepareRequestData(context.Background(), &fwksched.LLMRequest{Body: pb}, nil); err != nil {
			return err
		}
	}
	_ = pb.PromptText()
	return nil
}

// BenchmarkParse compares GIE's openai-parser with the director's re-marshal (the baseline)
// against both modes of this parser on the same bodies, and logs ns/op and allocs/op with
// their ratio to the baseline measured in the same run.
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
	for label, body := range benchBodies {
		var baseNs, baseAllocs float64
		for _, pp := range parsers {
			ns, allocs := measure(b, label+"/"+pp.name, body, func(body []byte) error { return parseAndRepackage(pp.p, body, h) })
			if ns == 0 {
				continue
			}
			if pp.name == "gie-openai" {
				baseNs, baseAllocs = ns, allocs
				continue
			}
			if baseNs > 0 {
				b.Logf("%s %s: %.0f CPU ns/op (%.2fx less than gie-openai+director), %.0f allocs/op (%.2fx fewer)",
					label, pp.name, ns, baseNs/ns, allocs, baseAllocs/allocs)
			}
		}
	}
}

// benchBodies yields the bodies both benchmarks measure, labelled shape/size ("string/1KB").
func benchBodies(yield func(label string, body []byte) bool) {
	for _, shape := range []struct {
		name string
		body func(int) []byte
	}{{"string", chatBody}, {"blocks", blocksBody}} {
		for _, size := range []int{1 << 10, 16 << 10, 220 << 10} {
			if !yield(fmt.Sprintf("%s/%dKB", shape.name, size>>10), shape.body(size)) {
				return
			}
		}
	}
}

// measure runs op on body as sub-benchmark name and returns its process CPU time and its
// allocations per op (0, 0 when the sub-benchmark was filtered out). Process CPU time (GC
// workers included) is steadier than wall time on a shared machine.
func measure(b *testing.B, name string, body []byte, op func([]byte) error) (ns, allocs float64) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		ns, allocs = testsupport.LoopCPU(b, func() error { return op(body) })
	})
	return ns, allocs
}
