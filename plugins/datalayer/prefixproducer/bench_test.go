package prefixproducer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// benchPrompt is a chat of about size bytes (system prompt + a document of words), led by a
// marker unique to seed so distinct seeds share no prefix (as pdgate-bench epp's bodies).
func benchPrompt(size int, seed uint64) *fwksched.LLMRequest {
	words := strings.Fields("the of and to in is that for on with as by this data model request prefill decode cache token latency")
	rng := rand.New(rand.NewPCG(seed, 1))
	var sb strings.Builder
	fmt.Fprintf(&sb, "doc %d: ", seed)
	for sb.Len() < size {
		sb.WriteString(words[rng.IntN(len(words))])
		sb.WriteByte(' ')
	}
	return chat("m", "system", "You are a careful assistant.", "user", sb.String())
}

// BenchmarkWholePromptMatch reports, in one run, the producer's CPU per request (hash, match
// over 16 endpoints, record on the decode and prefill picks) at 220 KB and 1 MB for
// whole-prompt matching (pdgate's default) and for GIE's 256-block cap, with their ratio.
// Distinct prompts are cycled over 8 decode and 8 prefill pods, as pdgate-bench epp does, so
// after the first round every prompt is matched (the walk covers all its blocks).
func BenchmarkWholePromptMatch(b *testing.B) {
	for _, size := range []int{220 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) {
			// 64 prompts at 220 KB, 8 at 1 MB: each decode pod's LRU (31,250 blocks) holds its share,
			// so every prompt is matched whole after the first round.
			reqs := make([]*fwksched.LLMRequest, 64)
			if size > 256<<10 {
				reqs = reqs[:8]
			}
			for i := range reqs {
				reqs[i] = benchPrompt(size, uint64(i))
			}
			eps := make([]fwksched.Endpoint, 16)
			for i := range eps {
				eps[i] = newEP(fmt.Sprint("p", i), nil)
			}
			whole := New("whole", DefaultParameters(), nil)
			capped := DefaultParameters()
			capped.MaxPrefixBlocksToMatch = GIEMaxPrefixBlocks
			gie := New("cap256", capped, nil)
			var cost [2]time.Duration
			var matched [2]int
			n := 0
			b.ReportAllocs()
			for b.Loop() {
				for k, p := range []*Producer{whole, gie} {
					r := reqs[n%len(reqs)]
					start := time.Now()
					_ = p.PrepareRequestData(context.Background(), r, eps)
					d, pf := eps[n%8].(*ep), eps[8+n%8].(*ep)
					matched[k] += d.info().MatchBlocks()
					p.PreRequest(context.Background(), r, result("decode", map[string]*ep{"decode": d, "prefill": pf}))
					p.Wait()
					cost[k] += time.Since(start)
				}
				n++
			}
			b.ReportMetric(float64(cost[0].Nanoseconds())/float64(n), "whole-ns/req")
			b.ReportMetric(float64(cost[1].Nanoseconds())/float64(n), "cap256-ns/req")
			b.ReportMetric(float64(cost[0])/float64(cost[1]), "whole/cap256")
			b.ReportMetric(float64(matched[0])/float64(n), "whole-matched-blocks/req")
			b.ReportMetric(float64(matched[1])/float64(n), "cap256-matched-blocks/req")
		})
	}
}
