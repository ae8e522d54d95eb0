package proxy

import (
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"
)

// BenchmarkSidecarOverhead sends the same streaming request to the fake engine directly and
// through the sidecar (no P/D), interleaved in one run, and reports the latency the sidecar
// adds (p50, p99) and the throughput ratio sidecar/direct.
func BenchmarkSidecarOverhead(b *testing.B) {
	engine := newFake(b, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i := 0; i < 16; i++ {
			_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"tok"}}]}`+"\n\n")
			w.(http.Flusher).Flush()
		}
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	})
	env := startProxy(b, testConfig(engine))
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 200) + `"}]}`
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	do := func(url string) time.Duration {
		start := time.Now()
		resp, err := client.Post(url+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("status %d", resp.StatusCode)
		}
		return time.Since(start)
	}
	do(engine.srv.URL)
	do(env.srv.URL)
	engine.mu.Lock()
	engine.reqs = nil
	engine.mu.Unlock()
	direct := make([]time.Duration, 0, b.N)
	via := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		direct = append(direct, do(engine.srv.URL))
		via = append(via, do(env.srv.URL))
		if i%256 == 255 { // the fake records requests; keep memory flat
			engine.mu.Lock()
			engine.reqs = nil
			engine.mu.Unlock()
		}
	}
	b.StopTimer()
	var sumD, sumV time.Duration
	for i := range direct {
		sumD += direct[i]
		sumV += via[i]
	}
	pct := func(d []time.Duration, q float64) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[int(q*float64(len(s)-1))]
	}
	b.ReportMetric(float64((pct(via, .5) - pct(direct, .5)).Microseconds()), "added-p50-µs")
	b.ReportMetric(float64((pct(via, .99) - pct(direct, .99)).Microseconds()), "added-p99-µs")
	b.ReportMetric(float64(pct(direct, .5).Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64(sumD)/float64(sumV), "throughput-ratio")
}
