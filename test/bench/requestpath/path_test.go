package requestpath

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/test/testsupport"
)

// configFor is a one-profile config with the given parser plugin lines.
func configFor(parser string) string {
	return `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: max-score-picker
- type: single-profile-handler
` + parser + `schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
`
}

var (
	gieParser  = configFor("- type: openai-parser\n") + "parser:\n  pluginRef: openai-parser\n"
	pdgateRaw  = configFor("- type: pdgate-openai-parser\n  parameters: {payload: raw}\n") + "parser:\n  pluginRef: pdgate-openai-parser\n"
	pdgateMap  = configFor("- type: pdgate-openai-parser\n  parameters: {payload: map}\n") + "parser:\n  pluginRef: pdgate-openai-parser\n"
	chatHeader = map[string]string{":path": "/v1/chat/completions", "x-request-id": "r1", "content-type": "application/json"}
)

// upstream runs one request and returns the destination and the body sent upstream.
func upstream(t *testing.T, p processor, headers map[string]string, body []byte) (string, []byte) {
	t.Helper()
	s := &stream{ctx: context.Background(), in: frames(headers, body, 16<<10), keep: true}
	if err := p.Process(s); err != nil {
		t.Fatal(err)
	}
	var dest string
	var out []byte
	for _, r := range s.out {
		if ir := r.GetImmediateResponse(); ir != nil {
			t.Fatalf("immediate %d %s", ir.GetStatus().GetCode(), ir.GetBody())
		}
		for _, h := range r.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
			if h.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
				dest = string(h.GetHeader().GetRawValue())
			}
		}
		out = append(out, r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetBody()...)
	}
	return dest, out
}

// The upstream body is the client's bytes unless the model is rewritten; then only the model
// differs. Stock GIE re-encodes every body (same JSON, other bytes), which this test tolerates
// for stock only.
func TestUpstreamBody(t *testing.T) {
	body := benchBody(40 << 10)
	for _, tt := range []struct {
		name, cfg, rewrite string
		wantModel          string
	}{
		{"openai-parser", gieParser, "", "m"},
		{"pdgate raw", pdgateRaw, "", "m"},
		{"pdgate map", pdgateMap, "", "m"},
		{"openai-parser rewrite", gieParser, "m2", "m2"},
		{"pdgate raw rewrite", pdgateRaw, "m2", "m2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := map[string]string{}
			for k, v := range chatHeader {
				h[k] = v
			}
			if tt.rewrite != "" {
				h["x-gateway-model-name-rewrite"] = tt.rewrite
			}
			for name, p := range map[string]processor{"pdgate": newPdgate(t, tt.cfg), "stock": newStock(t, tt.cfg)} {
				dest, out := upstream(t, p, h, body)
				if dest != "127.0.0.1:8000" {
					t.Fatalf("%s: destination %q", name, dest)
				}
				var sent, orig map[string]any
				if err := json.Unmarshal(out, &sent); err != nil {
					t.Fatalf("%s: upstream body: %v", name, err)
				}
				_ = json.Unmarshal(body, &orig)
				orig["model"] = tt.wantModel
				if fmt.Sprint(sent) != fmt.Sprint(orig) {
					t.Fatalf("%s: upstream JSON differs from the client's with model %q", name, tt.wantModel)
				}
				if name != "pdgate" {
					continue
				}
				want := body
				if tt.rewrite != "" {
					want = []byte(strings.Replace(string(body), `"model":"m"`, `"model":"`+tt.rewrite+`"`, 1))
				}
				if string(out) != string(want) {
					t.Fatalf("pdgate changed bytes beyond the model (len %d vs %d)", len(out), len(want))
				}
			}
		})
	}
}

// benchBody is a chat request of about n bytes whose long system prompt has the escapes and
// non-ASCII text real prompts have.
func benchBody(n int) []byte {
	unit := `Quarterly revenue grew 4.2 % in the EMEA region; see \"Table 3\" below.\n Caf\u00e9 prices rose. `
	text := strings.Repeat(unit, n/len(unit)+1)[:n]
	for strings.HasSuffix(text, `\`) {
		text = text[:len(text)-1]
	}
	return []byte(`{"model":"m","max_tokens":128,"stream":true,"messages":[{"role":"system","content":"` + text +
		`"},{"role":"user","content":"Summarise the document."}]}`)
}

// BenchmarkRequestPath runs one request (headers, body in 16 KiB frames, scheduling on one
// pod, the routing answer) through stock GIE's path with its openai-parser (the baseline) and
// through pdgate's path with openai-parser and with pdgate-openai-parser, on the same bodies,
// and logs CPU ns and allocations per request with their ratios to the baseline of the same
// run (efficiency: baseline CPU / variant CPU, above 1 means cheaper than stock).
func BenchmarkRequestPath(b *testing.B) {
	variants := []struct {
		name  string
		build func(testing.TB, string) processor
		cfg   string
	}{
		{"stock-gie", newStock, gieParser},
		{"pdgate-openai-parser", newPdgate, gieParser},
		{"pdgate-raw", newPdgate, pdgateRaw},
	}
	for _, size := range []int{1 << 10, 16 << 10, 220 << 10} {
		body := benchBody(size)
		var baseCPU, baseAllocs float64
		for _, v := range variants {
			var cpu, allocs float64
			b.Run(fmt.Sprintf("%dKB/%s", size>>10, v.name), func(b *testing.B) {
				p := v.build(b, v.cfg)
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				cpu, allocs = testsupport.LoopCPU(b, func() error {
					return p.Process(&stream{ctx: context.Background(), in: frames(chatHeader, body, 16<<10)})
				})
			})
			if cpu == 0 {
				continue
			}
			if v.name == "stock-gie" {
				baseCPU, baseAllocs = cpu, allocs
			} else if baseCPU > 0 {
				b.Logf("%dKB %s: %.0f CPU ns/request, efficiency %.2fx stock GIE; %.0f allocs (%.2fx fewer)",
					size>>10, v.name, cpu, baseCPU/cpu, allocs, baseAllocs/allocs)
			}
		}
	}
}
