package llmdmetrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestName(t *testing.T) {
	tests := []struct{ family, want string }{
		{"inference_objective_request_total", "llm_d_epp_request_total"},
		{"inference_objective_request_error_total", "llm_d_epp_request_error_total"},
		{"inference_objective_request_duration_seconds", "llm_d_epp_request_duration_seconds"},
		{"inference_objective_request_sizes", "llm_d_epp_request_size_bytes"},
		{"inference_objective_response_sizes", "llm_d_epp_response_size_bytes"},
		{"inference_objective_input_tokens", "llm_d_epp_request_input_tokens"},
		{"inference_objective_output_tokens", "llm_d_epp_request_output_tokens"},
		{"inference_objective_prompt_cached_tokens", "llm_d_epp_request_cached_tokens"},
		{"inference_objective_running_requests", "llm_d_epp_request_running"},
		{"inference_objective_normalized_time_per_output_token_seconds", "llm_d_epp_request_ntpot_seconds"},
		{"inference_pool_average_kv_cache_utilization", "llm_d_epp_average_kv_cache_utilization"},
		{"inference_pool_average_queue_size", "llm_d_epp_average_queue_size"},
		{"inference_pool_ready_pods", "llm_d_epp_ready_endpoints"},
		{"inference_extension_scheduler_e2e_duration_seconds", "llm_d_epp_scheduler_e2e_duration_seconds"},
		{"inference_extension_plugin_duration_seconds", "llm_d_epp_plugin_duration_seconds"},
		{"inference_extension_info", "llm_d_epp_info"},
		{"llm_d_inference_scheduler_disagg_decision_total", "llm_d_epp_disagg_decision_total"},
		{"pdgate_disagg_decisions_total", "llm_d_epp_disagg_decision_total"},
		{"pdgate_kv_events_index_evictions_total", "llm_d_epp_kv_cache_index_evictions_total"},
		{"pdgate_kv_events_lookups_total", "llm_d_epp_kv_cache_index_lookup_requests_total"},
		{"pdgate_kv_events_messages_total", "llm_d_epp_kv_cache_events_messages_received_total"},
		{"pdgate_kv_events_subscriber_reconnects_total", "llm_d_epp_kv_cache_events_subscriber_reconnections_total"},
		{"pdgate_kv_events_stores_skipped_total", "llm_d_epp_kv_cache_events_stores_skipped_total"},
		{"pdgate_kv_events_index_blocks", ""},
		{"pdgate_pd_combined_total", ""},
		{"llm_d_epp_request_total", ""},
		{"inference_objective_", ""},
		{"go_goroutines", ""},
	}
	for _, tt := range tests {
		t.Run(tt.family, func(t *testing.T) {
			got, ok := Name(tt.family)
			if got != tt.want || ok != (tt.want != "") {
				t.Fatalf("Name(%q) = %q, %v; want %q", tt.family, got, ok, tt.want)
			}
		})
	}
}

func TestRegistryServesBothNames(t *testing.T) {
	inner := prometheus.NewRegistry()
	reg := Wrap(inner)
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "inference_objective_request_total", Help: "Requests."},
		[]string{"model_name", "target_model_name"})
	duration := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "inference_objective_request_duration_seconds", Help: "Latency.",
		Buckets: []float64{0.1, 1}})
	// pdgate already emits this one under llm-d's name: its legacy twin must not overwrite it.
	own := prometheus.NewGauge(prometheus.GaugeOpts{Name: "llm_d_epp_info", Help: "pdgate's own."})
	legacy := prometheus.NewGauge(prometheus.GaugeOpts{Name: "inference_extension_info", Help: "GIE's."})
	other := prometheus.NewCounter(prometheus.CounterOpts{Name: "pdgate_pd_combined_total", Help: "No llm-d twin."})
	reg.MustRegister(requests, duration, own, legacy, other) // through the wrapper, into inner
	requests.WithLabelValues("m", "t").Add(3)
	duration.Observe(0.5)
	own.Set(7)
	legacy.Set(1)

	want := `
# HELP inference_objective_request_total Requests.
# TYPE inference_objective_request_total counter
inference_objective_request_total{model_name="m",target_model_name="t"} 3
# HELP llm_d_epp_request_total Requests.
# TYPE llm_d_epp_request_total counter
llm_d_epp_request_total{model_name="m",target_model_name="t"} 3
# HELP llm_d_epp_info pdgate's own.
# TYPE llm_d_epp_info gauge
llm_d_epp_info 7
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "inference_objective_request_total", "llm_d_epp_request_total", "llm_d_epp_info"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "llm_d_epp_request_duration_seconds"); err != nil || n != 1 {
		t.Fatalf("histogram twin: %d series, %v", n, err)
	}
	if n, _ := testutil.GatherAndCount(reg, "llm_d_epp_pd_combined_total"); n != 0 {
		t.Fatalf("a family with no llm-d twin was copied")
	}
	if n, _ := testutil.GatherAndCount(inner, "llm_d_epp_request_total"); n != 0 {
		t.Fatal("the inner registry must stay as registered")
	}
}

// The index's eviction counter is served under pdgate's name, llm-d v0.11's and the kvcache_
// alias v0.11 still emits beside it; a family with no deprecated alias gets only its twin.
func TestRegistryServesDeprecatedAlias(t *testing.T) {
	reg := Wrap(prometheus.NewRegistry())
	evictions := prometheus.NewCounter(prometheus.CounterOpts{Name: "pdgate_kv_events_index_evictions_total", Help: "Evicted."})
	messages := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_kv_events_messages_total", Help: "Messages."}, []string{"result"})
	reg.MustRegister(evictions, messages)
	evictions.Add(4)
	messages.WithLabelValues("applied").Add(2)
	for name, want := range map[string]int{
		"pdgate_kv_events_index_evictions_total": 1, "llm_d_epp_kv_cache_index_evictions_total": 1, "kvcache_index_evictions_total": 1,
		"llm_d_epp_kv_cache_events_messages_received_total": 1, "kvcache_kvevents_messages_received_total": 0,
	} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n != want {
			t.Errorf("%s: %d series, %v; want %d", name, n, err, want)
		}
	}
	if got := Names("pdgate_kv_events_index_evictions_total"); len(got) != 2 || got[1] != "kvcache_index_evictions_total" {
		t.Fatalf("Names: %v", got)
	}
	if got := Names("go_goroutines"); got != nil {
		t.Fatalf("Names of a family with no twin: %v", got)
	}
}
