// Package llmd drives the llm-d disaggregation plugin set through GIE's real scheduler,
// director and ext_proc StreamingServer over a real gRPC connection, with pods backed by real
// HTTP servers exposing vLLM metrics on loopback addresses.
package llmd

import (
	"fmt"
	"io"
	"net/http"
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

// vllmMetrics is an idle vLLM's /metrics page.
var vllmMetrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
	_, _ = io.WriteString(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"+
		"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n"+
		"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.1\n"+
		"# TYPE vllm:lora_requests_info gauge\nvllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"} 1\n"+
		"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1\n")
})

func inprocPods(pods []pod) []inprocepp.Pod {
	out := make([]inprocepp.Pod, len(pods))
	for i, p := range pods {
		out[i] = inprocepp.Pod{Name: p.name, IP: p.ip, Labels: p.labels, Metrics: vllmMetrics}
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
