package parser

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
)

// gieConfig is configFor with GIE's own openai-parser.
func gieConfig() string {
	return strings.NewReplacer("- type: pdgate-openai-parser\n  parameters: {payload: gie}\n", "- type: openai-parser\n",
		"pluginRef: pdgate-openai-parser", "pluginRef: openai-parser").Replace(configFor("gie"))
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

// BenchmarkDirector runs GIE's real director (parse, model handling, scheduling one pod,
// re-encoding) with GIE's openai-parser (the baseline) and pdgate-openai-parser in both modes,
// on the same bodies, and logs CPU ns and allocations per request with their ratios to the
// baseline measured in the same run.
func BenchmarkDirector(b *testing.B) {
	parsers := []struct{ name, cfg string }{
		{"gie-openai", gieConfig()}, {"pdgate-map", configFor("map")}, {"pdgate-raw", configFor("raw")},
	}
	for _, size := range []int{1 << 10, 16 << 10, 220 << 10} {
		body := benchBody(size)
		var baseCPU, baseAllocs float64
		for _, p := range parsers {
			var cpu, allocs float64
			b.Run(fmt.Sprintf("%dKB/%s", size>>10, p.name), func(b *testing.B) {
				dir := newDirector(b, p.cfg)
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				c0 := cpuTime()
				for b.Loop() {
					h := map[string]string{":path": "/v1/chat/completions", "x-request-id": "r"}
					raw := append([]byte(nil), body...)
					reqCtx := &handlers.RequestContext{Request: &handlers.Request{Headers: h, RawBody: raw}}
					if _, err := dir.HandleRequest(context.Background(), reqCtx); err != nil {
						b.Fatal(err)
					}
				}
				c := cpuTime() - c0
				runtime.ReadMemStats(&m1)
				cpu = float64(c.Nanoseconds()) / float64(b.N)
				allocs = float64(m1.Mallocs-m0.Mallocs) / float64(b.N)
				b.ReportMetric(cpu, "cpu-ns/op")
			})
			if cpu == 0 {
				continue
			}
			if p.name == "gie-openai" {
				baseCPU, baseAllocs = cpu, allocs
			} else if baseCPU > 0 {
				b.Logf("%dKB %s: %.0f CPU ns/request (%.2fx less than gie-openai), %.0f allocs (%.2fx fewer)",
					size>>10, p.name, cpu, baseCPU/cpu, allocs, baseAllocs/allocs)
			}
		}
	}
}

// cpuTime is the process's user+system CPU time (GC workers included), steadier than wall
// time on a shared machine.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
