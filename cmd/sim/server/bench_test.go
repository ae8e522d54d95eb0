package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

// loadResult is one open-loop load phase.
type loadResult struct {
	sent, ok, failed atomic.Int64
	maxLatency       atomic.Int64
	wall, sendLoop   time.Duration
	simCPU, genCPU   time.Duration
}

func (r *loadResult) summary() string {
	return fmt.Sprintf("%d requests in %v (issued in %v; %d ok, %d failed; max latency %v)", r.sent.Load(),
		r.wall.Round(time.Millisecond), r.sendLoop.Round(time.Millisecond), r.ok.Load(), r.failed.Load(),
		time.Duration(r.maxLatency.Load()).Round(time.Millisecond))
}

// procCPU reads another process's user+system time from /proc (clock ticks of 10 ms).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// openLoop sends rate req/s for d, round-robin over urls, without waiting for answers
// (bounded: rate·d requests, each with a 30 s client timeout).
func openLoop(pid int, urls []string, bodies [][]byte, hdr map[string]string, rate int, d time.Duration) *loadResult {
	stopScrape := scrapeEvery(urls, 50*time.Millisecond)
	defer stopScrape()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 8192}}
	defer client.CloseIdleConnections()
	total := int(float64(rate) * d.Seconds())
	interval := time.Second / time.Duration(rate)
	res := &loadResult{}
	var wg sync.WaitGroup
	sim0, gen0, start := procCPU(pid), testsupport.ProcessCPU(), time.Now()
	for i := 0; i < total; {
		due := int(time.Since(start)/interval) + 1
		for ; i < due && i < total; i++ {
			wg.Add(1)
			res.sent.Add(1)
			go func(i int) {
				defer wg.Done()
				t0 := time.Now()
				req, _ := http.NewRequest(http.MethodPost, urls[i%len(urls)], bytes.NewReader(bodies[i%len(bodies)]))
				for k, v := range hdr {
					req.Header.Set(k, v)
				}
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				switch {
				case err != nil:
					res.failed.Add(1)
				case resp.StatusCode == 200 || (hdr != nil && resp.StatusCode == 500):
					res.ok.Add(1)
				default:
					res.failed.Add(1)
				}
				for l, cur := int64(time.Since(t0)), res.maxLatency.Load(); l > cur && !res.maxLatency.CompareAndSwap(cur, l); cur = res.maxLatency.Load() {
				}
			}(i)
		}
		time.Sleep(interval)
	}
	res.sendLoop = time.Since(start)
	wg.Wait()
	res.wall, res.simCPU, res.genCPU = time.Since(start), procCPU(pid)-sim0, testsupport.ProcessCPU()-gen0
	return res
}

// scrapeEvery GETs every instance's /metrics each period, as GIE's data layer does (50 ms).
func scrapeEvery(urls []string, period time.Duration) (stop func()) {
	client := &http.Client{Timeout: 5 * time.Second}
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, u := range urls {
		m := strings.Replace(u, "/v1/chat/completions", "/metrics", 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(period)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					if resp, err := client.Get(m); err == nil {
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
			}
		}()
	}
	return func() { close(done); wg.Wait(); client.CloseIdleConnections() }
}

// BenchmarkSixtyFourInstances starts the sim binary with 64 instances in ONE process
// (--instances-file, real time) and drives a combined 2,000 short requests/s at it from this
// process, while every instance's /metrics is scraped every 50 ms as GIE does. It reports the
// sim process's CPU per request, and as the baseline measured in the same run the sim
// process's CPU per request for an immediate fault answer (HTTP round trip and routing only,
// no model work), plus the load generator's own CPU and the headroom a 2-core machine keeps
// at 2,000 req/s.
//
//	go test -run '^$' -bench SixtyFour -benchtime 1x ./cmd/sim/server
func BenchmarkSixtyFourInstances(b *testing.B) {
	const instances, rate = 64, 2000
	phase := 4 * time.Second
	dir := b.TempDir()
	bin := filepath.Join(dir, "sim")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/pdgate/pdgate/cmd/sim").CombinedOutput(); err != nil {
		b.Fatalf("build sim: %v\n%s", err, out)
	}
	var yaml strings.Builder
	var urls []string
	dialects := []string{DialectVLLM, DialectSGLang, DialectTRTLLM}
	var held []net.Listener // hold every picked port until all are picked: no duplicates
	for i := 0; i < instances; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		held = append(held, ln)
		port := ln.Addr().(*net.TCPAddr).Port
		fmt.Fprintf(&yaml, "- {name: s%d, port: %d, dialect: %s, seed: %d}\n", i, port, dialects[i%3], i+1)
		urls = append(urls, fmt.Sprintf("http://127.0.0.1:%d/v1/chat/completions", port))
	}
	for _, ln := range held {
		ln.Close()
	}
	file := filepath.Join(dir, "instances.yaml")
	_ = os.WriteFile(file, []byte(yaml.String()), 0o644)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--instances-file", file, "--zap-log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(os.Interrupt); _ = cmd.Wait() }()
	for _, u := range urls { // wait until every instance answers (bounded)
		h := strings.Replace(u, "/v1/chat/completions", "/health", 1)
		for i := 0; ; i++ {
			if resp, err := http.Get(h); err == nil {
				resp.Body.Close()
				break
			}
			if i > 300 {
				b.Fatalf("instance %s never came up", h)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	var bodies [][]byte
	for i := 0; i < 32; i++ {
		body, _ := json.Marshal(chat(fmt.Sprintf("short request %d: say something brief about routing", i), 4+i%5, map[string]any{"stream": i%2 == 0}))
		bodies = append(bodies, body)
	}
	pid := cmd.Process.Pid
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		base := openLoop(pid, urls, bodies, map[string]string{HeaderFault: "http-500"}, rate, phase)
		sim := openLoop(pid, urls, bodies, nil, rate, phase)
		cores := float64(runtime.NumCPU())
		per := func(d time.Duration, r *loadResult) float64 { return d.Seconds() / float64(r.sent.Load()) }
		simPer, basePer, genPer := per(sim.simCPU, sim), per(base.simCPU, base), per(sim.genCPU, sim)
		simHeadroom := 1 - rate*simPer/cores
		machineHeadroom := 1 - rate*(simPer+genPer)/cores
		b.ReportMetric(simPer*1e6, "sim-cpu-µs/req")
		b.ReportMetric(basePer*1e6, "baseline-sim-cpu-µs/req")
		b.ReportMetric(simPer/basePer, "x-baseline")
		b.ReportMetric(genPer*1e6, "loadgen-cpu-µs/req")
		b.ReportMetric(cores/simPer, "sim-capacity-req/s")
		b.ReportMetric(simHeadroom*100, "sim-headroom-%")
		b.ReportMetric(machineHeadroom*100, "machine-headroom-%")
		b.ReportMetric(float64(sim.failed.Load()), "failed")
		b.Logf("full requests:  %s; sim process CPU %v = %.0f µs/request", sim.summary(), sim.simCPU, simPer*1e6)
		b.Logf("baseline (immediate http-500 fault, same load): %s; sim process CPU %v = %.0f µs/request", base.summary(), base.simCPU, basePer*1e6)
		b.Logf("ratio full/baseline %.2f; load generator %.0f µs/request; at %d req/s on %v cores the sims use %.0f%% of the CPU (headroom %.0f%%), sims + load generator %.0f%% (headroom %.0f%%)",
			simPer/basePer, genPer*1e6, rate, cores, (1-simHeadroom)*100, simHeadroom*100, (1-machineHeadroom)*100, machineHeadroom*100)
	}
}
