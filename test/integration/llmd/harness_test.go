// Package llmd drives the llm-d disaggregation plugin set through GIE's real scheduler,
// director and ext_proc StreamingServer over a real gRPC connection, with pods backed by real
// HTTP servers exposing vLLM metrics on loopback addresses.
package llmd

import (
	"fmt"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/inprocepp"
)

// pod is one model-server pod of the test pool.
type pod struct {
	name   string
	ip     string
	labels map[string]string
}

// epp is a running EPP (in process, or the real runner) plus its ext_proc client.
type epp struct {
	*inprocepp.EPP
	port int
}

func inprocPods(pods []pod) []inprocepp.Pod {
	out := make([]inprocepp.Pod, len(pods))
	for i, p := range pods {
		out[i] = inprocepp.Pod{Name: p.name, IP: p.ip, Labels: p.labels, Metrics: inprocepp.IdleVLLM}
	}
	return out
}

// startEPP loads configPath exactly as a user's file and serves it over ext_proc.
func startEPP(t *testing.T, configPath string, pods []pod) *epp {
	t.Helper()
	e := inprocepp.Start(t, configPath, inprocPods(pods), inprocepp.Options{PoolName: "llmd-pool", Verbosity: 1})
	return &epp{EPP: e, port: e.Port}
}

// startMetricsServers runs one vLLM metrics server per pod on its loopback IP, all on one port.
func startMetricsServers(t *testing.T, pods []pod) int {
	t.Helper()
	return inprocepp.ServeMetrics(t, inprocPods(pods))
}

// answer is what the EPP told the gateway about one request.
type answer struct {
	immediate   int // HTTP status of an ImmediateResponse, 0 when forwarded
	body        string
	set         map[string]string
	removed     map[string]bool
	destination string
}

// send runs one request through a real ext_proc stream.
func (e *epp) send(t *testing.T, path string, headers map[string]string, body string) answer {
	t.Helper()
	r, done, err := e.Open(path, headers, body, 10*time.Second)
	done()
	if err != nil {
		t.Fatal(err)
	}
	return answer{immediate: r.Immediate, body: r.Body, set: r.Set, removed: r.Removed, destination: r.Set["x-gateway-destination-endpoint"]}
}

func (a answer) String() string {
	return fmt.Sprintf("immediate=%d body=%q destination=%s set=%v removed=%v", a.immediate, a.body, a.destination, a.set, a.removed)
}
