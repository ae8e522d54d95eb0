package pdpair

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	selectedPrefill = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_pd_selected_prefill_pod_total",
		Help: "Prefill pods picked by aibrix-pd-pair.",
	}, []string{"pod", "roleset"})
	selectedDecode = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_pd_selected_decode_pod_total",
		Help: "Decode pods (including combined pods) picked by aibrix-pd-pair.",
	}, []string{"pod", "roleset", "kind"})
	combinedPicks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_pd_combined_total",
		Help: "Requests served by a combined pod, by cause (no_bucket, no_pair, overflow).",
	}, []string{"cause"})
	fastPaths = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_pd_fast_path_total",
		Help: "Load-imbalance fast paths that narrowed the candidates, by side (prefill, decode).",
	}, []string{"side"})
	selectFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_pd_select_failures_total",
		Help: "Requests aibrix-pd-pair could not place, by HTTP status answered.",
	}, []string{"status"})
	registerOnce sync.Once
)

// RegisterMetrics registers the plugin's metrics with controller-runtime's registry once.
func RegisterMetrics() {
	registerOnce.Do(func() {
		crmetrics.Registry.MustRegister(selectedPrefill, selectedDecode, combinedPicks, fastPaths, selectFailures)
	})
}
