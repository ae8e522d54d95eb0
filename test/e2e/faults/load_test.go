package faults

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/labtest"
)

type request struct {
	stream    bool
	maxTokens int
	prompt    string
	image     string // an image_url item makes the request multimodal (E/P/D)
	header    http.Header
}

// result is what one client saw.
type result = testsupport.Answer

var loadClient = &http.Client{Timeout: gatewayTimeout + 10*time.Second}

func send(ctx context.Context, base string, r request) result {
	if r.maxTokens == 0 {
		r.maxTokens = 8
	}
	if r.prompt == "" {
		r.prompt = "Explain prefill and decode disaggregation in one sentence."
	}
	var content any = r.prompt
	if r.image != "" {
		content = []map[string]any{{"type": "text", "text": r.prompt}, {"type": "image_url", "image_url": map[string]string{"url": r.image}}}
	}
	body, _ := json.Marshal(map[string]any{"model": "meta-llama/Llama-3.1-8B-Instruct", "stream": r.stream,
		"max_tokens": r.maxTokens, "messages": []map[string]any{{"role": "user", "content": content}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return result{Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	return testsupport.Do(loadClient, req, r.stream)
}

// outcome classifies a result (testsupport.Outcome), an error body by its type.
func outcome(r result) string { return testsupport.Outcome(r, jsonErrorType) }

// report is the load's tally.
type report struct {
	sent, received int64
	outcomes       map[string]int
	maxLatency     time.Duration
}

func (r report) String() string {
	keys := make([]string, 0, len(r.outcomes))
	for k := range r.outcomes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s:%d", k, r.outcomes[k]))
	}
	return fmt.Sprintf("sent %d, received %d, outcomes {%s}, max latency %v", r.sent, r.received,
		strings.Join(parts, " "), r.maxLatency.Round(time.Millisecond))
}

// load runs workers closed-loop until stop closes or max requests went out, each request
// bounded by the client timeout, and returns the tally. mk builds the i-th request.
func load(base string, workers, max int, stop <-chan struct{}, mk func(i int) request) report {
	return loadPaced(base, workers, max, 0, stop, mk)
}

// loadPaced is load with each worker starting at most one request per pace, so a run spans
// its whole window however fast the machine answers (a fault case needs requests in flight
// when the fault happens, not a load that finished before it).
func loadPaced(base string, workers, max int, pace time.Duration, stop <-chan struct{}, mk func(i int) request) report {
	var sent atomic.Int64
	var mu sync.Mutex
	rep := report{outcomes: map[string]int{}}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := int(sent.Add(1))
				if i > max {
					sent.Add(-1)
					return
				}
				began := time.Now()
				res := send(context.Background(), base, mk(i))
				mu.Lock()
				rep.received++
				rep.outcomes[outcome(res)]++
				if res.Elapsed > rep.maxLatency {
					rep.maxLatency = res.Elapsed
				}
				mu.Unlock()
				if wait := pace - time.Since(began); wait > 0 {
					select {
					case <-stop:
						return
					case <-time.After(wait):
					}
				}
			}
		}()
	}
	wg.Wait()
	rep.sent = sent.Load()
	return rep
}

// checkOutcomes fails on lost or undocumented answers and on outcomes the case does not
// allow; every case allows 200.
func checkOutcomes(t *testing.T, rep report, allowed ...string) {
	t.Helper()
	t.Logf("load: %s", rep)
	if rep.sent != rep.received {
		t.Errorf("sent %d requests, received %d responses", rep.sent, rep.received)
	}
	ok := map[string]bool{"200": true}
	for _, a := range allowed {
		ok[a] = true
	}
	for o, n := range rep.outcomes {
		if !ok[o] {
			t.Errorf("%d requests ended %q, not an allowed outcome %v", n, o, allowed)
		}
	}
	if rep.maxLatency > gatewayTimeout+2*time.Second {
		t.Errorf("a request took %v, beyond the gateway's %v bound", rep.maxLatency, gatewayTimeout)
	}
}

// sumPrefix adds every sample whose name starts with prefix.
func sumPrefix(m map[string]float64, prefix string) float64 {
	s := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, prefix) {
			s += math.Abs(v)
		}
	}
	return s
}

// ledgerGauges are the token-load gauges that must return to zero once no request is in
// flight.
var ledgerGauges = []string{"pdgate_token_load_active_tokens", "pdgate_token_load_kv_tokens", "pdgate_token_load_decode_tokens"}

// baseline is each process's goroutine and open-fd count.
type baseline map[string][2]float64

func (c *cluster) baseline(t *testing.T) baseline {
	t.Helper()
	out := baseline{}
	for name, url := range c.metricsURLs() {
		m, err := labtest.Metrics(url)
		if err != nil {
			t.Fatalf("baseline %s: %v", name, err)
		}
		out[name] = [2]float64{m["go_goroutines"], m["process_open_fds"]}
	}
	return out
}

// Slack for idle keep-alive connections and their goroutines a pool may keep after a run.
const goroutineSlack, fdSlack = 30, 20

// checkSettled waits (bounded) until the ledger gauges are zero and every process is back
// near its baseline, then reports what is left.
func (c *cluster) checkSettled(t *testing.T, base baseline) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var problems []string
	for {
		problems = problems[:0]
		if m, err := labtest.Metrics(c.eppMetricsURL()); err != nil {
			problems = append(problems, "epp metrics: "+err.Error())
		} else {
			for _, g := range ledgerGauges {
				if v := sumPrefix(m, g); v != 0 {
					problems = append(problems, fmt.Sprintf("%s = %v", g, v))
				}
			}
		}
		for name, url := range c.metricsURLs() {
			b, ok := base[name]
			if !ok {
				continue
			}
			m, err := labtest.Metrics(url)
			if err != nil {
				problems = append(problems, name+": "+err.Error())
				continue
			}
			if g := m["go_goroutines"]; g > b[0]+goroutineSlack {
				problems = append(problems, fmt.Sprintf("%s goroutines %v (baseline %v)", name, g, b[0]))
			}
			if f := m["process_open_fds"]; f > b[1]+fdSlack {
				problems = append(problems, fmt.Sprintf("%s open fds %v (baseline %v)", name, f, b[1]))
			}
		}
		if len(problems) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, p := range problems {
		t.Errorf("not settled: %s", p)
	}
}
