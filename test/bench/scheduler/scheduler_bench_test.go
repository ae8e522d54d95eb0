package scheduler

import (
	"context"
	"fmt"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/test/testsupport"
)

var sizes = []int{8, 64, 512}

// TestCyclesSchedule runs every benchmarked config once per size and checks the primary
// profile picked a pod with the role the config routes to, so the benchmark measures real work.
func TestCyclesSchedule(t *testing.T) {
	for _, bc := range configs() {
		for _, n := range []int{8, 64} {
			t.Run(fmt.Sprintf("%s/%d", bc.name, n), func(t *testing.T) {
				c := newCycle(t, bc, n)
				req := request(1)
				snap := c.endpoints
				res, err := c.sched.Schedule(context.Background(), req, snap)
				if err != nil {
					t.Fatal(err)
				}
				primary := res.ProfileResults[res.PrimaryProfileName]
				if primary == nil || len(primary.TargetEndpoints) == 0 {
					t.Fatalf("no primary target: %+v", res)
				}
				labels := primary.TargetEndpoints[0].GetMetadata().Labels
				switch {
				case strings.HasPrefix(bc.name, "b-"), strings.HasPrefix(bc.name, "d-"):
					if labels["llm-d.ai/role"] != "decode" {
						t.Fatalf("primary pod role %q, want decode", labels["llm-d.ai/role"])
					}
				case strings.HasPrefix(bc.name, "c-"):
					if labels["role-name"] != "decode" {
						t.Fatalf("primary pod role %q, want decode", labels["role-name"])
					}
				}
				if err := c.run(context.Background(), request(2)); err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

type result struct{ ns, cpu float64 }

// BenchmarkSchedulingCycle measures a full cycle per config and size and logs ns/op,
// allocs/op and the ratio to GIE's default config (a) at the same size, from this run.
func BenchmarkSchedulingCycle(b *testing.B) {
	results := map[string]result{}
	for _, n := range sizes {
		for _, bc := range configs() {
			c := newCycle(b, bc, n)
			key := fmt.Sprintf("%s/%d", bc.name, n)
			b.Run(key, func(b *testing.B) {
				reqs := make([]*fwksched.LLMRequest, 64)
				for i := range reqs {
					reqs[i] = request(i)
				}
				results[key] = measure(b, c, reqs)
			})
		}
	}
	var sb strings.Builder
	sb.WriteString("\n| config | endpoints | wall ns/op | CPU ns/op | CPU ratio to (a) |\n|---|---|---|---|---|\n")
	for _, n := range sizes {
		base := results[fmt.Sprintf("a-gie-default/%d", n)].cpu
		for _, bc := range configs() {
			r, ok := results[fmt.Sprintf("%s/%d", bc.name, n)]
			if !ok || base == 0 {
				continue
			}
			fmt.Fprintf(&sb, "| %s | %d | %.0f | %.0f | %.2f |\n", bc.name, n, r.ns, r.cpu, r.cpu/base)
		}
	}
	fmt.Println(sb.String())
}

// measure runs the cycle over reqs in turn and reports wall and process CPU time per cycle.
func measure(b *testing.B, c *cycle, reqs []*fwksched.LLMRequest) result {
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	cpuNs, _ := testsupport.LoopCPU(b, func() error {
		err := c.run(ctx, reqs[i%len(reqs)])
		i++
		return err
	})
	return result{ns: float64(b.Elapsed().Nanoseconds()) / float64(b.N), cpu: cpuNs}
}

// BenchmarkSchedulingCycleLargePrompt is one cycle per config with a 220 KB user message (a
// long RAG context) over 16 endpoints, with the CPU ratio to GIE's default config from this
// run: the prompt-proportional work (prefix hashing and matching, AIBrix's 4-character blocks:
// 55,000 of them) that the 1.5 KB cycle above hides.
func BenchmarkSchedulingCycleLargePrompt(b *testing.B) {
	const endpoints = 16
	big := strings.Repeat("Context: the quarterly report lists revenue by region and product. ", 220<<10/68)
	results := map[string]result{}
	for _, bc := range configs() {
		c := newCycle(b, bc, endpoints)
		b.Run(bc.name, func(b *testing.B) {
			// Distinct prompts: every cycle records 55,000 new blocks, as fresh documents do.
			reqs := make([]*fwksched.LLMRequest, 16)
			for i := range reqs {
				reqs[i] = request(i)
				reqs[i].Body.ChatCompletions.Messages[1].Content.Raw = fmt.Sprintf("document %d. %s", i, big)
				reqs[i].RequestSizeBytes = len(big) + 1700
			}
			results[bc.name] = measure(b, c, reqs)
		})
	}
	base := results["a-gie-default"].cpu
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n220 KB prompt, %d endpoints\n| config | wall ns/op | CPU ns/op | CPU ratio to (a) |\n|---|---|---|---|\n", endpoints)
	for _, bc := range configs() {
		if r, ok := results[bc.name]; ok && base > 0 {
			fmt.Fprintf(&sb, "| %s | %.0f | %.0f | %.2f |\n", bc.name, r.ns, r.cpu, r.cpu/base)
		}
	}
	fmt.Println(sb.String())
}
