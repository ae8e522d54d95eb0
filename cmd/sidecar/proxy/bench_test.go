package proxy

import (
	"io"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
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

// BenchmarkHandoffChecks sends the same P/D requests (vLLM NIXL: prefill, then a decode whose
// usage the checks read; half streaming) through two sidecars in one run, one with the
// handoff checks and one without (the unexported hook), alternating in batches, and reports
// the process CPU per request of each and their ratio. The fake engines and the client run
// in the same process and cost the same on both sides, so the difference is the checks'.
func BenchmarkHandoffChecks(b *testing.B) {
	const prompt = 400
	pre := newFake(b, prefillProduced(EngineVLLM, prompt, 25))
	dec := newFake(b, func(w http.ResponseWriter, r *http.Request, body map[string]any) {
		if s, _ := body["stream"].(bool); s {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; i < 16; i++ {
				_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"tok"}}]}`+"\n\n")
				w.(http.Flusher).Flush()
			}
			_, _ = io.WriteString(w, `data: {"choices":[],"usage":{"prompt_tokens":400,"completion_tokens":16,"prompt_tokens_details":{"cached_tokens":400}}}`+"\n\ndata: [DONE]\n\n")
			return
		}
		decodeReporting(prompt, prompt)(w, r, body)
	})
	cfg := testConfig(dec, pre.hp())
	checked := startProxy(b, cfg)
	cfg.uncheckedHandoff = true
	unchecked := startProxy(b, cfg)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	bodies := []string{`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("word ", 200) + `"}]}`,
		`{"model":"m","stream":true,"messages":[{"role":"user","content":"` + strings.Repeat("word ", 200) + `"}]}`}
	do := func(url, body string) {
		req, _ := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
		req.Header.Set(protocol.HeaderPrefillerHostPort, pre.hp().String())
		resp, err := client.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get(protocol.HeaderPrefillOutcome) != outcomeOK {
			b.Fatalf("status %d outcome %q", resp.StatusCode, resp.Header.Get(protocol.HeaderPrefillOutcome))
		}
	}
	forget := func() { // the fakes record requests; keep memory flat
		for _, f := range []*fake{pre, dec} {
			f.mu.Lock()
			f.reqs = nil
			f.mu.Unlock()
		}
	}
	const batch = 32
	var cpu [2]time.Duration
	n := 0
	b.ResetTimer()
	for n < b.N {
		for side, env := range []*testEnv{checked, unchecked} {
			start := testsupport.ProcessCPU()
			for i := 0; i < batch; i++ {
				do(env.srv.URL, bodies[i%2])
			}
			cpu[side] += testsupport.ProcessCPU() - start
		}
		n += batch
		forget()
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(n) }
	b.ReportMetric(per(cpu[0]), "checked-cpu-µs/req")
	b.ReportMetric(per(cpu[1]), "unchecked-cpu-µs/req")
	b.ReportMetric(per(cpu[0]-cpu[1]), "added-cpu-µs/req")
	b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "cpu-ratio")
}
