package scheduler

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// primaryRole reports whether a pod is one of the 8 equal pods the config routes the primary
// (decode) profile to.
func primaryRole(name string, labels map[string]string) bool {
	switch {
	case strings.HasPrefix(name, "a-"):
		return true
	case strings.HasPrefix(name, "c-"):
		// Only the short-prompt bucket's rolesets (even numbers, see aibrixPod) may take the
		// burst's short prompts: the long-bucket rolesets are correctly left out.
		var rs int
		_, _ = fmt.Sscanf(labels["roleset-name"], "rs%d", &rs)
		return labels["role-name"] == "decode" && rs%2 == 0
	default:
		return labels["llm-d.ai/role"] == "decode"
	}
}

// burstRequest is a short chat turn with a prompt of its own, so prefix affinity does not
// (legitimately) pull the burst to one pod.
func burstRequest(i int) *fwksched.LLMRequest {
	r := request(i)
	r.Body.ChatCompletions.Messages = []fwksched.Message{{Role: "user",
		Content: fwksched.Content{Raw: fmt.Sprintf("%d: independent question number %d, please answer briefly", i*7919, i)}}}
	r.RequestSizeBytes = 120
	return r
}

// burstSpread sends a back-to-back burst to 8 equal idle primary pods with no metric refresh
// and no completions in between, and returns max/min requests per pod (+Inf if a pod got none).
func burstSpread(t testing.TB, bc benchConfig, requests int) (float64, map[string]int) {
	pods := map[string]int{"a-gie-default": 8, "b-llmd-pd": 16, "c-aibrix-hybrid": 32, "d-llmd-epd": 24}[bc.name]
	c := newCycleWith(t, bc, pods, true)
	counts := map[string]int{}
	for _, ep := range c.endpoints {
		if md := ep.GetMetadata(); primaryRole(bc.name, md.Labels) {
			counts[md.PodName] = 0
		}
	}
	for i := 0; i < requests; i++ {
		md, err := c.runOpen(context.Background(), burstRequest(i), false)
		if err != nil {
			t.Fatalf("%s request %d: %v", bc.name, i, err)
		}
		counts[md.PodName]++
	}
	lo, hi := math.MaxInt, 0
	for _, n := range counts {
		lo, hi = min(lo, n), max(hi, n)
	}
	if lo == 0 {
		return math.Inf(1), counts
	}
	return float64(hi) / float64(lo), counts
}

// BenchmarkBurstSpread prints, per config, the spread of an 800-request burst over 8 equal
// idle pods (max/min requests per pod) next to GIE's default config.
func BenchmarkBurstSpread(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("\n| config | max/min requests per pod (8 equal idle pods, 800-request burst) |\n|---|---|\n")
	for _, bc := range configs() {
		var spread float64
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				spread, _ = burstSpread(b, bc, 800)
			}
			b.ReportMetric(spread, "max/min")
		})
		fmt.Fprintf(&sb, "| %s | %.2f |\n", bc.name, spread)
		_, counts := burstSpread(b, bc, 800)
		b.Logf("%s per-pod counts: %v", bc.name, counts)
	}
	fmt.Println(sb.String())
}

// TestBurstReachesPrimaryPods checks the burst harness routes every request of every config
// to one of the 8 primary pods it counts.
func TestBurstReachesPrimaryPods(t *testing.T) {
	for _, bc := range configs() {
		_, counts := burstSpread(t, bc, 40)
		total := 0
		for _, n := range counts {
			total += n
		}
		if len(counts) != 8 || total != 40 {
			t.Fatalf("%s: %d primary pods counted, %d requests: %v", bc.name, len(counts), total, counts)
		}
	}
}
