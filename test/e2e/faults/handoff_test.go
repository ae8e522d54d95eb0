package faults

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// The checked handoff, end to end: every handoff fault of the simulator, injected on every
// request (x-sim-fault reaches both legs through the gateway and the sidecar), in a P/D lab
// of each engine dialect. No client may get a clean 200 that says its handoff worked
// (x-pdgate-prefill-outcome ok): each request ends in an error answer naming its cause
// (x-error-pd-cause, with x-error-pd-prefill / x-error-pd-decode on the sidecar's own
// answers), a stream cut before [DONE] (a check failing after the 200 went out, or an error
// the engine streamed; the sidecar's error event before the cut reaches the client when the
// EPP relays it within the gateway's drain window), or a 200 whose decode
// prefilled by itself (fallback-local, the cause named). Clean traffic through the same labs
// is never flagged.

// handoffPrompt is long enough (~600 tokens) that half its KV is more than one KV block of
// any engine short.
var handoffPrompt = strings.Repeat("Disaggregated serving hands the prompt's KV from prefill to decode. ", 35)

// handoffTopology is a P/D lab of one dialect where every request is disaggregated.
func handoffTopology(t *testing.T, name, pods string) string {
	return `name: handoff-` + name + `
eppConfig: epp/pd-always.yaml
simProfile: ../sim/llama3-8b-h100.yaml
timeScale: 10
pods:
` + pods
}

// handoffClass sorts one answer: "violation" (a clean 200 that claims the handoff worked),
// "clean", "<status>/<x-error-pd-* leg>/<cause>", "cut/<has error event>", "fallback/<cause>",
// or "unexplained/…" for an answer that names no cause.
func handoffClass(r result) string {
	cause := r.Header.Get("x-error-pd-cause")
	switch o := outcome(r); {
	case o == "200" && r.Header.Get("x-pdgate-prefill-outcome") == "fallback-local":
		if cause == "" {
			return "unexplained/fallback"
		}
		return "fallback/" + cause
	case o == "200":
		return "ok"
	case o == "cut":
		return "cut/error-event=" + fmt.Sprint(strings.Contains(string(r.Body), `"error"`))
	case r.Status == 0:
		return "lost"
	default:
		leg := ""
		for _, h := range []string{"x-error-pd-prefill", "x-error-pd-decode", "x-error-pd-encode"} {
			if r.Header.Get(h) == "true" {
				leg = h
			}
		}
		if cause == "" {
			return fmt.Sprintf("unexplained/%d", r.Status)
		}
		return fmt.Sprintf("%d/%s/%s", r.Status, leg, cause)
	}
}

// handoffRequestsEnv raises the requests per fault and lab (default 32, half streaming) for the
// long run: PDGATE_HANDOFF_FAULT_REQUESTS=528 sends about 10,000 requests over the four labs.
const handoffRequestsEnv = "PDGATE_HANDOFF_FAULT_REQUESTS"

func TestHandoffFaultsNeverAnswerOK(t *testing.T) {
	perFault := 32
	if v := os.Getenv(handoffRequestsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 {
			t.Fatalf("%s=%q: want a whole number >= 2", handoffRequestsEnv, v)
		}
		perFault = n
	}
	faults := []string{"kv-params-dropped", "partial-kv", "wrong-rank", "decode-error-race"}
	labs := []struct {
		name, subnet, pods string
		skip               map[string]bool // faults that do not reach this dialect's handoff
	}{
		{name: "vllm", subnet: "127.0.91", pods: `- {name: prefill-a, role: prefill, roleset: rs-a, engine: vllm, kvConnector: nixl}
- {name: decode-a, role: decode, roleset: rs-a, engine: vllm, kvConnector: nixl}
`},
		{name: "sglang", subnet: "127.0.92", pods: `- {name: prefill-a, role: prefill, roleset: rs-a, engine: sglang}
- {name: decode-a, role: decode, roleset: rs-a, engine: sglang}
`},
		{name: "trtllm-context-first", subnet: "127.0.93", pods: `- {name: prefill-a, role: prefill, roleset: rs-a, engine: trtllm}
- {name: decode-a, role: decode, roleset: rs-a, engine: trtllm}
`},
		// generation_first takes the context rank from /server_info, not from the context
		// answer the wrong-rank fault edits: that fault does not reach its handoff.
		{name: "trtllm-generation-first", subnet: "127.0.94", skip: map[string]bool{"wrong-rank": true}, pods: `- {name: prefill-a, role: prefill, roleset: rs-a, engine: trtllm}
- {name: decode-a, role: decode, roleset: rs-a, engine: trtllm, trtScheduleStyle: generation_first}
`},
	}
	var mu sync.Mutex
	totals := map[string]int{}
	for _, lb := range labs {
		t.Run(lb.name, func(t *testing.T) {
			c := startCluster(t, topology(t, handoffTopology(t, lb.name, lb.pods)), lb.subnet, nil)
			run := func(fault string) map[string]int {
				got := map[string]int{}
				var gmu sync.Mutex
				var wg sync.WaitGroup
				next := make(chan int)
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for i := range next {
							rq := request{stream: i%2 == 0, maxTokens: 8, prompt: fmt.Sprintf("%d %s %s", i, fault, handoffPrompt)}
							if fault != "" {
								rq.header = http.Header{"X-Sim-Fault": {fault}}
							}
							class := handoffClass(send(t.Context(), c.URL(), rq))
							gmu.Lock()
							got[class]++
							gmu.Unlock()
						}
					}()
				}
				for i := 0; i < perFault; i++ {
					next <- i
				}
				close(next)
				wg.Wait()
				return got
			}
			if clean := run(""); clean["ok"] != perFault {
				t.Errorf("clean traffic flagged: %v", clean)
			}
			for _, fault := range faults {
				if lb.skip[fault] {
					continue
				}
				got := run(fault)
				t.Logf("%s: %s", fault, tally(got))
				mu.Lock()
				for k, n := range got {
					totals[k] += n
				}
				mu.Unlock()
				for class, n := range got {
					if class == "ok" || class == "lost" || strings.HasPrefix(class, "unexplained") {
						t.Errorf("%s: %d answers %q", fault, n, class)
					}
				}
			}
		})
	}
	t.Logf("every lab, every fault: %s", tally(totals))
}

func tally(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
