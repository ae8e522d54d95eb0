package server

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/sim/batching"
	"github.com/pdgate/pdgate/test/testsupport"
	dto "github.com/prometheus/client_model/go"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	giemetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/extractor/metrics"
)

func scrape(t *testing.T, in *Instance) map[string]*dto.MetricFamily {
	t.Helper()
	return testsupport.MetricFamilies(t, "http://"+in.Addr()+"/metrics")
}

func histSum(t *testing.T, in *Instance, name string) float64 {
	t.Helper()
	f, ok := scrape(t, in)[name]
	if !ok || len(f.GetMetric()) == 0 {
		t.Fatalf("no %s", name)
	}
	return f.GetMetric()[0].GetHistogram().GetSampleSum()
}

// GIE's own core-metrics-extractor reads the exposition of each dialect.
func TestMetricsParsedByGIEExtractor(t *testing.T) {
	clk := newPump(t)
	tests := []struct{ dialect, engine string }{
		{DialectVLLM, "vllm"}, {DialectSGLang, "sglang"}, {DialectTRTLLM, "trtllm-serve"},
	}
	plugin, err := giemetrics.CoreMetricsExtractorFactory("ext", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ext := plugin.(*giemetrics.Extractor)
	for _, tc := range tests {
		in := startSim(t, clk, Options{Dialect: tc.dialect, Role: RoleCombined, KVCapacityTokens: 8000})
		for i := 0; i < 3; i++ {
			if r := post(t, "http://"+in.Addr()+"/v1/chat/completions", chat(strings.Repeat("metrics ", 50+i), 20, nil), nil); r.status != 200 {
				t.Fatalf("%s: %d", tc.dialect, r.status)
			}
		}
		ep := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{Labels: map[string]string{giemetrics.DefaultEngineTypeLabelKey: tc.engine}}, fwkdl.NewMetrics())
		if err := ext.Extract(context.Background(), scrape(t, in), ep); err != nil {
			t.Fatalf("%s: GIE extractor: %v", tc.dialect, err)
		}
		m := ep.GetMetrics()
		if m.CacheBlockSize != 16 || m.CacheNumBlocks != 500 || m.WaitingQueueSize != 0 || m.RunningRequestsSize != 0 || m.UpdateTime.IsZero() {
			t.Errorf("%s: extracted %+v", tc.dialect, m)
		}
		fams := scrape(t, in)
		n := dialectMetrics[tc.dialect]
		for _, name := range []string{n.prefillTime, n.genThroughput, n.success, "pdgate_sim_running_requests_drain_rate_1m"} {
			f, ok := fams[name]
			if !ok {
				t.Errorf("%s: %s missing", tc.dialect, name)
				continue
			}
			mm := f.GetMetric()[0]
			v := mm.GetGauge().GetValue() + mm.GetCounter().GetValue() + float64(mm.GetHistogram().GetSampleCount())
			if v <= 0 {
				t.Errorf("%s: %s is %v after 3 requests", tc.dialect, name, v)
			}
		}
	}
}

// Running, waiting and KV usage follow the scheduler, read through GIE's extractor, on a
// manually advanced clock.
func TestMetricsFollowLoad(t *testing.T) {
	clk := batching.NewFakeClock()
	in := startSim(t, clk, Options{Dialect: DialectSGLang, MaxBatch: 1, KVCapacityTokens: 10000})
	plugin, _ := giemetrics.CoreMetricsExtractorFactory("ext", nil, nil)
	ext := plugin.(*giemetrics.Extractor)
	extract := func() *fwkdl.Metrics {
		ep := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{Labels: map[string]string{giemetrics.DefaultEngineTypeLabelKey: "sglang"}}, fwkdl.NewMetrics())
		if err := ext.Extract(context.Background(), scrape(t, in), ep); err != nil {
			t.Fatal(err)
		}
		return ep.GetMetrics()
	}
	done := make(chan result, 2)
	for i := 0; i < 2; i++ {
		go func() {
			done <- post(t, "http://"+in.Addr()+"/v1/completions", map[string]any{"prompt": []int{1, 2, 3, 4, 5, 6, 7, 8}, "max_tokens": 40}, nil)
		}()
	}
	for i := 0; ; i++ { // both submitted: one admitted, one queued behind max batch 1
		if st := in.sched.Stats(); st.Running+st.Waiting == 2 {
			break
		}
		if i > 50000 {
			t.Fatal("requests never reached the scheduler")
		}
		waitABit()
	}
	d, _ := clk.NextIn()
	clk.Advance(d) // the first request's prefill step
	m := extract()
	if m.RunningRequestsSize != 1 || m.WaitingQueueSize != 1 || m.KVCacheUsagePercent != 9.0/10000 {
		t.Fatalf("under load: running %d waiting %d kv %v", m.RunningRequestsSize, m.WaitingQueueSize, m.KVCacheUsagePercent)
	}
	for i := 0; i < 100000; i++ {
		d, ok := clk.NextIn()
		if !ok {
			break
		}
		clk.Advance(d)
	}
	for i := 0; i < 2; i++ {
		if r := <-done; r.status != 200 {
			t.Fatalf("request: %d %s", r.status, r.raw)
		}
	}
	if m := extract(); m.RunningRequestsSize != 0 || m.WaitingQueueSize != 0 || m.KVCacheUsagePercent != 0 {
		t.Fatalf("after drain: %+v", m)
	}
}

// The engine request intervals of two scripted requests behind max batch 1, on a manually
// advanced clock: every histogram's sum is what the profile's step times say.
func TestEngineRequestIntervals(t *testing.T) {
	tests := []struct {
		dialect string
		want    []string // the interval histograms the dialect exports: queue, prefill, decode, inference
	}{
		{DialectVLLM, []string{"vllm:request_queue_time_seconds", "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds", "vllm:request_inference_time_seconds"}},
		{DialectSGLang, []string{"sglang:queue_time_seconds", "sglang:request_prefill_time_seconds", "", ""}},
		{DialectTRTLLM, []string{"trtllm_request_queue_time_seconds", "trtllm_request_prefill_time_seconds", "", ""}},
	}
	for _, tc := range tests {
		t.Run(tc.dialect, func(t *testing.T) {
			clk := batching.NewFakeClock()
			in := startSim(t, clk, Options{Dialect: tc.dialect, MaxBatch: 1, KVCapacityTokens: 10000})
			prompts := [][]int{seqTokens(1, 300), seqTokens(5000, 200)}
			done := make([]chan result, len(prompts))
			for i, p := range prompts {
				done[i] = make(chan result, 1)
				go func() {
					done[i] <- post(t, "http://"+in.Addr()+"/v1/completions", map[string]any{"prompt": p, "max_tokens": 6 - i}, nil)
				}()
				for n := 0; ; n++ { // the second queues behind the first, both at model time 0
					if st := in.sched.Stats(); st.Running+st.Waiting == i+1 {
						break
					}
					if n > 50000 {
						t.Fatal("request never reached the scheduler")
					}
					waitABit()
				}
			}
			for d, ok := clk.NextIn(); ok; d, ok = clk.NextIn() {
				clk.Advance(d)
			}
			prof := in.prof
			var prefill, decode [2]time.Duration
			for i, p := range prompts {
				r := <-done[i]
				if r.status != 200 {
					t.Fatalf("request %d: %d %s", i, r.status, r.raw)
				}
				gen := int(field(t, r.body, "usage", "completion_tokens").(float64))
				if gen < 2 {
					t.Fatalf("request %d generated %d tokens: no decode interval to check", i, gen)
				}
				prefill[i] = prof.PrefillTime(len(p), 0)
				for g := 1; g < gen; g++ {
					decode[i] += prof.DecodeStep(1, len(p)+g)
				}
			}
			sums := []time.Duration{
				prefill[0] + decode[0], // the second waited for the whole first
				prefill[0] + prefill[1],
				decode[0] + decode[1],
				prefill[0] + prefill[1] + decode[0] + decode[1],
			}
			fams := scrape(t, in)
			for i, name := range tc.want {
				if name == "" {
					continue
				}
				f, ok := fams[name]
				if !ok || len(f.GetMetric()) != 1 {
					t.Fatalf("no %s", name)
				}
				h := f.GetMetric()[0].GetHistogram()
				if got, want := h.GetSampleSum(), sums[i].Seconds(); h.GetSampleCount() != 2 || math.Abs(got-want) > 1e-9 {
					t.Errorf("%s: %d observations summing to %v s, want 2 summing to %v s", name, h.GetSampleCount(), got, want)
				}
			}
			if tc.dialect != DialectSGLang {
				return
			}
			stages := map[string]float64{}
			for _, m := range fams["sglang:per_stage_req_latency_seconds"].GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "stage" {
						stages[l.GetValue()] = m.GetHistogram().GetSampleSum()
					}
				}
			}
			for stage, want := range map[string]time.Duration{"prefill_waiting": sums[0], "prefill_forward": sums[1], "decode_loop": sums[2]} {
				if math.Abs(stages[stage]-want.Seconds()) > 1e-9 {
					t.Errorf("stage %s sums to %v s, want %v s (stages %v)", stage, stages[stage], want.Seconds(), stages)
				}
			}
		})
	}
}

func seqTokens(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}
