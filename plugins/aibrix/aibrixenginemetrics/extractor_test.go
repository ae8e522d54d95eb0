package aibrixenginemetrics

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	sourcemetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/source/metrics"

	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func parse(t *testing.T, text string) sourcemetrics.PrometheusMetricMap {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func endpoint(labels map[string]string) fwkdl.Endpoint {
	return eptest.Data(eptest.Spec{Namespace: "ns", Name: "p-rank-0", PodName: "p", Labels: labels})
}

func TestExtractPerEngine(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		text   string
		want   engineattr.Metrics
	}{
		{name: "vllm via default", text: `
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3
vllm:num_requests_running{model_name="n"} 2
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m"} 1
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="m"} 0.25
vllm:kv_cache_usage_perc{model_name="n"} 0.5
# TYPE vllm:avg_generation_throughput_toks_per_s gauge
vllm:avg_generation_throughput_toks_per_s{model_name="m"} 120
# TYPE vllm:request_prefill_time_seconds histogram
vllm:request_prefill_time_seconds_bucket{model_name="m",le="+Inf"} 4
vllm:request_prefill_time_seconds_sum{model_name="m"} 2
vllm:request_prefill_time_seconds_count{model_name="m"} 4
`, want: engineattr.Metrics{Engine: "vllm", Running: 5, HasRunning: true, Waiting: 1, HasWaiting: true, KVUsage: 0.5, HasKVUsage: true,
			GenThroughput: 120, HasGenThroughput: true, PrefillTimeMean: 0.5, HasPrefillTimeMean: true}},
		{name: "sglang via aibrix annotation", labels: map[string]string{protocol.AnnotationLabelPrefix + "model.aibrix.ai/engine": "sglang"}, text: `
sglang:num_running_reqs 7
sglang:num_queue_reqs 2
sglang:token_usage 0.9
sglang:gen_throughput 300
sglang:num_prefill_prealloc_queue_reqs 4
sglang:num_decode_prealloc_queue_reqs 5
`, want: engineattr.Metrics{Engine: "sglang", Running: 7, HasRunning: true, Waiting: 2, HasWaiting: true, KVUsage: 0.9, HasKVUsage: true,
			GenThroughput: 300, HasGenThroughput: true, PrefillPrealloc: 4, DecodePrealloc: 5}},
		{name: "trtllm via gie label, histogram with zero count", labels: map[string]string{DefaultEngineLabelKey: "trtllm-serve"}, text: `
trtllm_num_requests_running 1
# TYPE trtllm_request_prefill_time_seconds histogram
trtllm_request_prefill_time_seconds_bucket{le="+Inf"} 0
trtllm_request_prefill_time_seconds_sum 0
trtllm_request_prefill_time_seconds_count 0
`, want: engineattr.Metrics{Engine: "trtllm-serve", Running: 1, HasRunning: true}},
		{name: "NaN and Inf samples are missing", text: `
vllm:num_requests_running NaN
vllm:kv_cache_usage_perc +Inf
`, want: engineattr.Metrics{Engine: "vllm"}},
		{name: "unknown label engine falls back to default", labels: map[string]string{DefaultEngineLabelKey: "tgi"}, text: `
vllm:num_requests_waiting 9
`, want: engineattr.Metrics{Engine: "vllm", Waiting: 9, HasWaiting: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &clock{t: time.Unix(1000, 0)}
			x, err := New("x", Params{}, c.now)
			if err != nil {
				t.Fatal(err)
			}
			ep := endpoint(tt.labels)
			if err := x.Extract(context.Background(), parse(t, tt.text), ep); err != nil {
				t.Fatal(err)
			}
			got := engineattr.Get(ep.GetAttributes())
			tt.want.UpdateTime = c.t
			if got == nil || *got != tt.want {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestDrainRateAndTokenRate(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	x, _ := New("x", Params{}, c.now)
	ep := endpoint(nil)
	step := func(d time.Duration, finished, tokens float64) *engineattr.Metrics {
		c.t = c.t.Add(d)
		text := "vllm:request_success_total " + ftoa(finished) + "\nvllm:generation_tokens_total " + ftoa(tokens) + "\n"
		if err := x.Extract(context.Background(), parse(t, text), ep); err != nil {
			t.Fatal(err)
		}
		return engineattr.Get(ep.GetAttributes())
	}
	if m := step(0, 10, 100); m.HasDrainRate1m || m.HasGenThroughput {
		t.Fatalf("one reading has no rate: %+v", m)
	}
	if m := step(10*time.Second, 20, 600); !m.HasDrainRate1m || m.DrainRate1m != 1 || m.GenThroughput != 50 {
		t.Fatalf("rate after 10s: %+v", m)
	}
	// No progress: rate clamps to 0.01 as AIBrix's clamp_min does.
	if m := step(70*time.Second, 20, 600); m.DrainRate1m != minDrainRate || m.GenThroughput != 0 {
		t.Fatalf("idle: %+v", m)
	}
	// Counter reset (restart) restarts the window.
	if m := step(time.Second, 1, 1); m.HasDrainRate1m {
		t.Fatalf("reset: %+v", m)
	}
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func TestFactoryValidation(t *testing.T) {
	if _, err := Factory("x", []byte(`{"defaultEngine":"tgi"}`), nil); err == nil || !strings.Contains(err.Error(), "defaultEngine") {
		t.Fatalf("want defaultEngine error, got %v", err)
	}
	if _, err := Factory("x", []byte(`{"bogus":1}`), nil); err == nil {
		t.Fatal("unknown field must fail")
	}
	p, err := Factory("x", []byte(`{"defaultEngine":"tgi","engineConfigs":{"tgi":{"running":"tgi_running"}}}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.TypedName().Type != Type {
		t.Fatal(p.TypedName())
	}
}
