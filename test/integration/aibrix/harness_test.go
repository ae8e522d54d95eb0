// Package aibrix drives the AIBrix PD plugin set (config/aibrix-pd.yaml and config/aibrix/*)
// through GIE's real scheduler, director and ext_proc StreamingServer (wrapped by pdgate's
// ext_proc server) over a real gRPC connection, with AIBrix-labelled pods backed by real HTTP
// servers on loopback addresses that expose vLLM metrics scraped by the real data layer.
package aibrix

import (
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"

	"github.com/pdgate/pdgate/cmd/epp/podmeta"
	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/test/inprocepp"
	"github.com/pdgate/pdgate/test/testsupport"
)

// pod is one model-server pod of the test pool with AIBrix labels and annotations.
type pod struct {
	name        string
	ip          string
	labels      map[string]string
	annotations map[string]string
	// waiting is the queue length the pod's metrics report; finished requests grow by one per
	// scrape, so the extractor's one-minute drain rate is positive.
	waiting int
}

// epp is a running EPP assembly plus its ext_proc client.
type epp struct {
	*inprocepp.EPP
	ds   datastore.Datastore
	port int
	byIP map[string]string
	seq  int
	mu   sync.Mutex
}

// startEPP loads configPath as a user's file and serves it over ext_proc.
func startEPP(t *testing.T, configPath string, pods []pod) *epp {
	t.Helper()
	in := make([]inprocepp.Pod, len(pods))
	byIP := map[string]string{}
	for i, p := range pods {
		byIP[p.ip] = p.name
		in[i] = inprocepp.Pod{Name: p.name, IP: p.ip, Labels: p.labels, Annotations: p.annotations,
			Metrics: testsupport.DrainingVLLMMetrics(int64(p.waiting))}
	}
	e := inprocepp.Start(t, configPath, in, inprocepp.Options{PoolName: "aibrix-pool", WrapDatastore: podmeta.WrapDatastore})
	out := &epp{EPP: e, ds: e.DS, port: e.Port, byIP: byIP}
	out.waitForMetrics(t, len(pods))
	return out
}

// waitForMetrics waits (bounded) until the data layer extracted engine metrics, with a drain
// rate, for every pod.
func (e *epp) waitForMetrics(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		ready := 0
		for _, ep := range e.ds.PodList(datastore.AllPodsPredicate) {
			if m := engineattr.Get(ep.GetAttributes()); m != nil && m.HasDrainRate1m {
				ready++
			}
		}
		if ready == n {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("engine metrics not extracted for all %d pods within 15s", n)
}

// answer is what the EPP told the gateway about one request.
type answer struct {
	immediate int
	body      string
	decode    string // pod name of x-gateway-destination-endpoint
	prefill   string // pod name of x-prefiller-host-port ("" when absent)
	set       map[string]string
}

func (e *epp) podAt(t *testing.T, hostport string) string {
	t.Helper()
	if hostport == "" {
		return ""
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || port != strconv.Itoa(e.port) {
		t.Fatalf("unexpected address %q", hostport)
	}
	name, ok := e.byIP[host]
	if !ok {
		t.Fatalf("address %q is no pod of the pool", hostport)
	}
	return name
}

// send runs one request through a real ext_proc stream and ends the stream (which runs the
// EPP's end-of-request hooks, as a finished response would).
func (e *epp) send(t *testing.T, headers map[string]string, body string) answer {
	t.Helper()
	a, done := e.open(t, headers, body)
	done()
	return a
}

// open runs one request through a real ext_proc stream and keeps the stream open (the
// response is still "streaming") until done is called.
func (e *epp) open(t *testing.T, headers map[string]string, body string) (answer, func()) {
	t.Helper()
	e.mu.Lock()
	e.seq++
	id := fmt.Sprintf("req-%d", e.seq)
	e.mu.Unlock()
	r, done, err := e.Open("/v1/completions", withRequestID(headers, id), body, 20*time.Second)
	if err != nil {
		t.Error(err)
		return answer{}, done
	}
	a := answer{immediate: r.Immediate, body: r.Body, set: r.Set}
	if a.immediate == 0 {
		a.decode = e.podAt(t, a.set["x-gateway-destination-endpoint"])
		a.prefill = e.podAt(t, a.set["x-prefiller-host-port"])
	}
	return a, done
}

// withRequestID adds x-request-id (GIE keys per-request plugin state by it) to a copy of h.
func withRequestID(h map[string]string, id string) map[string]string {
	out := map[string]string{"x-request-id": id}
	for k, v := range h {
		out[k] = v
	}
	return out
}
