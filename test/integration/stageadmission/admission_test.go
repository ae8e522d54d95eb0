// Package stageadmission drives the EPP's stage-aware admission through the real
// EPP assembly over ext_proc: per request, on the P/D stages the request needs.
package stageadmission

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"

	"github.com/pdgate/pdgate/test/inprocepp"
	"github.com/pdgate/pdgate/test/testsupport"
)

// queue serves a vLLM /metrics page whose waiting queue the test sets.
type queue struct{ waiting atomic.Int64 }

func (q *queue) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	testsupport.WriteVLLMMetrics(w, q.waiting.Load(), 1)
}

type answer struct {
	status   int               // immediate answer's status; 0 when routed
	headers  map[string]string // immediate answer's headers, or the routing headers set
	routedTo string
}

func send(t *testing.T, e *inprocepp.EPP, prompt string) answer {
	t.Helper()
	body := fmt.Sprintf(`{"model":"m","prompt":%q}`, prompt)
	r, done, err := e.Open("/v1/completions", map[string]string{metadata.ObjectiveKey: "batch"}, body, 10*time.Second)
	done()
	if err != nil {
		t.Fatal(err)
	}
	a := answer{status: r.Immediate, headers: map[string]string{}}
	for k, v := range r.ImmediateHeaders {
		a.headers[k] = v
	}
	for k, v := range r.Set {
		a.headers[k] = v
	}
	if len(r.Destinations) > 0 {
		a.routedTo = r.Destinations[0]
	}
	return a
}

// Every request is sheddable (InferenceObjective priority -1). Prefill-heavy overload: the
// prefill tier is saturated (6 waiting per pod, threshold 5), the decode tier idle. Short
// prompts (decode-only under the decider's 256 tokens) are admitted and routed to a decode
// pod with no prefill leg; long prompts get 429 with llm-d's reason header. The configured
// detector measured fleet-wide over the same pool (GIE's rule) is below 1, so it would admit
// both classes: it sheds neither. Then the decode tier saturates and the prefill tier drains:
// now the short prompts are shed too (they need a decode slot), so admission is by stage,
// not by prompt length.
func TestDecodeOnlyServedWhilePrefillShed(t *testing.T) {
	qs := map[string]*queue{"prefill-0": {}, "prefill-1": {}, "decode-0": {}, "decode-1": {}}
	var pods []inprocepp.Pod
	for i, name := range []string{"prefill-0", "prefill-1", "decode-0", "decode-1"} {
		role := strings.TrimSuffix(strings.TrimSuffix(name, "-0"), "-1")
		pods = append(pods, inprocepp.Pod{Name: name, IP: fmt.Sprintf("127.0.26.%d", i+1),
			Labels: map[string]string{"llm-d.ai/role": role}, Metrics: qs[name]})
	}
	set := func(prefill, decode int64) map[string]int {
		qs["prefill-0"].waiting.Store(prefill)
		qs["prefill-1"].waiting.Store(prefill)
		qs["decode-0"].waiting.Store(decode)
		qs["decode-1"].waiting.Store(decode)
		return map[string]int{"prefill-0": int(prefill), "prefill-1": int(prefill), "decode-0": int(decode), "decode-1": int(decode)}
	}
	set(6, 0)
	e := inprocepp.Start(t, "testdata/pd-admission.yaml", pods, inprocepp.Options{PoolName: "stageadmission"})
	e.SetObjective("batch", -1)
	eps := e.WaitScraped(t, set(6, 0))

	fleetWide := e.Saturation(t, "utilization-detector", eps)
	t.Logf("fleet-wide utilization-detector saturation: %.2f (admits both classes when < 1)", fleetWide)
	if fleetWide >= 1 {
		t.Fatalf("fleet-wide saturation %.2f: the comparison needs a detector that admits both classes", fleetWide)
	}

	short := "What is a KV cache?"
	long := strings.Repeat("Summarise the following design document about disaggregated serving. ", 60)
	for i := 0; i < 5; i++ {
		a := send(t, e, fmt.Sprintf("%d. %s", i, short))
		if a.status != 0 {
			t.Fatalf("short (decode-only) request %d shed under prefill overload: %d %v", i, a.status, a.headers)
		}
		if !strings.HasPrefix(a.routedTo, "127.0.26.3:") && !strings.HasPrefix(a.routedTo, "127.0.26.4:") || a.headers["x-prefiller-host-port"] != "" {
			t.Fatalf("short request %d: routed to %q, prefiller %q: want a decode pod, no prefill leg", i, a.routedTo, a.headers["x-prefiller-host-port"])
		}
		b := send(t, e, fmt.Sprintf("%d. %s", i, long))
		if b.status != http.StatusTooManyRequests || b.headers["x-llm-d-request-dropped-reason"] != "rejected-saturated" {
			t.Fatalf("long request %d under prefill overload: %d %v, want 429 rejected-saturated", i, b.status, b.headers)
		}
	}

	// Decode saturated, prefill idle: both classes need decode, both are shed.
	e.WaitScraped(t, set(0, 6))
	for _, p := range []string{short, long} {
		if a := send(t, e, p); a.status != http.StatusTooManyRequests {
			t.Fatalf("%d-byte request with the decode tier saturated: %d, want 429", len(p), a.status)
		}
	}
}
