package eppharness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// LoopbackAddresses returns n distinct loopback addresses in 127.77.0.0/16 (127.77.0.1,
// 127.77.0.2, ...), so many fake pods can share one port number, as pods share a pool's target
// port in a cluster. 127.0.0.0/8 is routed to lo on Linux without configuration.
func LoopbackAddresses(n int) ([]string, error) {
	if n < 1 || n > 65000 {
		return nil, fmt.Errorf("loopback addresses: n=%d, want 1..65000", n)
	}
	out := make([]string, n)
	for i := range out {
		v := i + 1 // skip .0.0
		out[i] = fmt.Sprintf("127.77.%d.%d", v>>8, v&255)
	}
	return out, nil
}

// CommonPort finds a TCP port free on every given host (the pods of a pool share the target
// port number on distinct IPs). The port is released again before returning; a concurrent
// process may take it, which the caller sees as a bind error.
func CommonPort(hosts []string) (int, error) {
	if len(hosts) == 0 {
		return 0, errors.New("common port: no hosts")
	}
	for attempt := 0; attempt < 50; attempt++ {
		l, err := net.Listen("tcp", net.JoinHostPort(hosts[0], "0"))
		if err != nil {
			return 0, fmt.Errorf("common port: listening on %s: %w", hosts[0], err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := true
		for _, h := range hosts[1:] {
			l2, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				ok = false
				break
			}
			_ = l2.Close()
		}
		_ = l.Close()
		if ok {
			return port, nil
		}
	}
	return 0, fmt.Errorf("common port: none free on all %d hosts after 50 tries", len(hosts))
}

// FreePort returns a TCP port free on 127.0.0.1 and on the wildcard address (GIE's EPP binds
// ":port"), released before returning.
func FreePort() (int, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return ports[0], nil
}

// FreePorts returns n distinct free ports. Every listener stays open until all n are picked:
// ports picked one at a time and released in between can come back twice (an EPP handed the
// same port for health and metrics fails to start).
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for len(ports) < n {
		l, err := net.Listen("tcp", ":0")
		if err != nil {
			return nil, fmt.Errorf("free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// EngineMetrics are the values a fake model server reports (vLLM names), the same at every
// scrape: equal idle pods by default.
type EngineMetrics struct {
	Waiting, Running int
	KVCacheUsage     float64 // 0..1
	BlockSize        int     // vllm:cache_config_info block_size; 0 = 16
	NumGPUBlocks     int     // vllm:cache_config_info num_gpu_blocks; 0 = 8192
}

// Text renders the metrics in Prometheus text format with vLLM's names: the series GIE's
// default vLLM mapping and pdgate's engine-metrics extractor read.
func (m EngineMetrics) Text() string {
	bs, nb := m.BlockSize, m.NumGPUBlocks
	if bs == 0 {
		bs = 16
	}
	if nb == 0 {
		nb = 8192
	}
	return fmt.Sprintf(`# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} %d
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} %d
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} %g
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="%d",num_gpu_blocks="%d"} 1
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="0",running_lora_adapters="",waiting_lora_adapters=""} %d
# TYPE vllm:avg_generation_throughput_toks_per_s gauge
vllm:avg_generation_throughput_toks_per_s{model_name="m"} 0
# TYPE vllm:avg_prompt_throughput_toks_per_s gauge
vllm:avg_prompt_throughput_toks_per_s{model_name="m"} 0
`, m.Waiting, m.Running, m.KVCacheUsage, bs, nb, time.Now().Unix())
}

// ModelServers are in-process fake model servers: one HTTP listener per host on a common port
// answering /metrics (fixed EngineMetrics) and /health, and counting scrapes per host. They live
// in the caller's process, so an EPP's CPU figure does not include them.
type ModelServers struct {
	Port    int
	hosts   []string
	scrapes map[string]*atomic.Int64
	mu      sync.Mutex
	metrics EngineMetrics
	servers []*http.Server
}

// StartModelServers listens on host:port for every host (port 0: a common free port).
func StartModelServers(hosts []string, port int, m EngineMetrics) (*ModelServers, error) {
	if port == 0 {
		var err error
		if port, err = CommonPort(hosts); err != nil {
			return nil, err
		}
	}
	ms := &ModelServers{Port: port, hosts: hosts, scrapes: map[string]*atomic.Int64{}, metrics: m}
	for _, h := range hosts {
		if _, dup := ms.scrapes[h]; dup {
			ms.Close()
			return nil, fmt.Errorf("model servers: host %s listed twice", h)
		}
		l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
		if err != nil {
			ms.Close()
			return nil, fmt.Errorf("model server %s:%d: %w", h, port, err)
		}
		n := &atomic.Int64{}
		ms.scrapes[h] = n
		srv := &http.Server{Handler: ms.handler(n), ReadHeaderTimeout: 10 * time.Second}
		ms.servers = append(ms.servers, srv)
		go func() { _ = srv.Serve(l) }()
	}
	return ms, nil
}

func (ms *ModelServers) handler(scrapes *atomic.Int64) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		scrapes.Add(1)
		ms.mu.Lock()
		text := ms.metrics.Text()
		ms.mu.Unlock()
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte(text))
	})
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

// SetMetrics changes what every server reports from the next scrape on.
func (ms *ModelServers) SetMetrics(m EngineMetrics) {
	ms.mu.Lock()
	ms.metrics = m
	ms.mu.Unlock()
}

// Scrapes returns how many times host's /metrics was read.
func (ms *ModelServers) Scrapes(host string) int64 {
	if n := ms.scrapes[host]; n != nil {
		return n.Load()
	}
	return 0
}

// TotalScrapes is the sum over all hosts.
func (ms *ModelServers) TotalScrapes() int64 {
	var t int64
	for _, n := range ms.scrapes {
		t += n.Load()
	}
	return t
}

// WaitScraped waits until each of hosts (none given: every host) has been scraped at least
// `more` times beyond the counts in base (from Snapshot), i.e. an EPP started after base
// scrapes every endpoint.
func (ms *ModelServers) WaitScraped(ctx context.Context, base map[string]int64, more int64, hosts ...string) error {
	if len(hosts) == 0 {
		hosts = ms.hosts
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		missing := ""
		for _, h := range hosts {
			if ms.Scrapes(h) < base[h]+more {
				missing = h
				break
			}
		}
		if missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("model server %s: not scraped %d more time(s): %w", missing, more, ctx.Err())
		case <-t.C:
		}
	}
}

// Snapshot returns the current scrape count per host.
func (ms *ModelServers) Snapshot() map[string]int64 {
	out := make(map[string]int64, len(ms.hosts))
	for _, h := range ms.hosts {
		out[h] = ms.Scrapes(h)
	}
	return out
}

// Close stops every listener.
func (ms *ModelServers) Close() {
	for _, s := range ms.servers {
		_ = s.Close()
	}
}

// ScrapesOf is the sum of the scrape counts of the given hosts: what one EPP's pods served.
func (ms *ModelServers) ScrapesOf(hosts ...string) int64 {
	var t int64
	for _, h := range hosts {
		t += ms.Scrapes(h)
	}
	return t
}
