package lab

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// metricNames are the simulator series the status table reads, per dialect (the names
// GIE's engine mappings read; see cmd/sim/README.md).
var metricNames = map[string]struct{ running, waiting, kv, done string }{
	EngineVLLM:   {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:request_success_total"},
	EngineSGLang: {"sglang:num_running_reqs", "sglang:num_queue_reqs", "sglang:token_usage", "sglang:num_requests_total"},
	EngineTRTLLM: {"trtllm_num_requests_running", "trtllm_num_requests_waiting", "trtllm_kv_cache_utilization", "trtllm_request_success_total"},
}

// PodStatus is one row of the live status table.
type PodStatus struct {
	Pod      string  `json:"pod"`
	Role     string  `json:"role"`
	Endpoint string  `json:"endpoint"`
	InFlight float64 `json:"inFlight"`
	Queue    float64 `json:"queue"`
	KVUse    float64 `json:"kvUse"`
	// Served counts finished engine requests: prefill legs on prefill pods, decode legs (or
	// whole requests) on decode and combined pods, encode legs on encode pods.
	Served float64 `json:"served"`
	Err    string  `json:"error,omitempty"`
}

// ParseMetrics sums every sample of each metric name in a Prometheus text exposition.
func ParseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if strings.HasPrefix(rest, "{") {
			j := strings.LastIndexByte(rest, '}')
			if j < 0 {
				return nil, fmt.Errorf("metrics: unterminated labels in %q", line)
			}
			rest = rest[j+1:]
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: value of %q: %w", name, err)
		}
		out[name] += v
	}
	return out, sc.Err()
}

// Status scrapes every simulator's /metrics concurrently.
func (p *Plan) Status(ctx context.Context) []PodStatus {
	client := &http.Client{Timeout: 2 * time.Second}
	out := make([]PodStatus, len(p.Pods))
	var wg sync.WaitGroup
	for i, pod := range p.Pods {
		wg.Add(1)
		go func(i int, pod Pod) {
			defer wg.Done()
			st := PodStatus{Pod: pod.Name, Role: pod.Role, Endpoint: pod.Endpoint()}
			defer func() { out[i] = st }()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+pod.EngineAddr()+"/metrics", nil)
			resp, err := client.Do(req)
			if err != nil {
				st.Err = err.Error()
				return
			}
			defer resp.Body.Close()
			m, err := ParseMetrics(resp.Body)
			if err != nil {
				st.Err = err.Error()
				return
			}
			names := metricNames[pod.Engine]
			st.InFlight, st.Queue, st.KVUse, st.Served = m[names.running], m[names.waiting], m[names.kv], m[names.done]
		}(i, pod)
	}
	wg.Wait()
	return out
}

// RenderStatus writes the status table.
func RenderStatus(w io.Writer, rows []PodStatus) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "POD\tROLE\tENDPOINT\tIN-FLIGHT\tQUEUE\tKV USE\tPREFILL LEGS\tDECODE LEGS\tENCODE LEGS")
	for _, r := range rows {
		if r.Err != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t-\t-\t-\t- (%s)\n", r.Pod, r.Role, r.Endpoint, shorten(r.Err, 40))
			continue
		}
		p, d, e := "-", "-", "-"
		served := strconv.FormatFloat(r.Served, 'f', 0, 64)
		switch r.Role {
		case RolePrefill:
			p = served
		case RoleDecode, RoleCombined:
			d = served
		case RoleEncode:
			e = served
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%.0f\t%.1f%%\t%s\t%s\t%s\n", r.Pod, r.Role, r.Endpoint,
			r.InFlight, r.Queue, 100*r.KVUse, p, d, e)
	}
	_ = tw.Flush()
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
