package aibrixpdpair

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// pairMetrics are aibrix-pd-pair's series, registered on the registerer the EPP hands the
// factory (pluginkit.Registerer); instances of the plugin in one EPP share them.
type pairMetrics struct {
	selectedPrefill *prometheus.CounterVec
	selectedDecode  *prometheus.CounterVec
	combinedPicks   *prometheus.CounterVec
	decodeOnly      *prometheus.CounterVec
	fastPaths       *prometheus.CounterVec
	selectFailures  *prometheus.CounterVec
}

func newPairMetrics(reg prometheus.Registerer) (*pairMetrics, error) {
	m := &pairMetrics{}
	var err error
	reg1 := func(dst **prometheus.CounterVec, opts prometheus.CounterOpts, labels ...string) {
		if err == nil {
			*dst, err = pluginkit.Register(reg, prometheus.NewCounterVec(opts, labels))
		}
	}
	reg1(&m.selectedPrefill, prometheus.CounterOpts{Name: "pdgate_pd_selected_prefill_pod_total",
		Help: "Prefill pods picked by aibrix-pd-pair."}, "pod", "roleset")
	reg1(&m.selectedDecode, prometheus.CounterOpts{Name: "pdgate_pd_selected_decode_pod_total",
		Help: "Decode pods (including combined pods) picked by aibrix-pd-pair."}, "pod", "roleset", "kind")
	reg1(&m.combinedPicks, prometheus.CounterOpts{Name: "pdgate_pd_combined_total",
		Help: "Requests served by a combined pod, by cause (no_bucket, no_pair, overflow)."}, "cause")
	reg1(&m.decodeOnly, prometheus.CounterOpts{Name: "pdgate_pd_decode_only_total",
		Help: "Requests aibrix-pd-pair kept on a decode pod without a prefill leg, by cause (cached, prefill_backed_up, or the prefill decider's)."}, "cause")
	reg1(&m.fastPaths, prometheus.CounterOpts{Name: "pdgate_pd_fast_path_total",
		Help: "Load-imbalance fast paths that narrowed the candidates, by side (prefill, decode)."}, "side")
	reg1(&m.selectFailures, prometheus.CounterOpts{Name: "pdgate_pd_select_failures_total",
		Help: "Requests aibrix-pd-pair could not place, by HTTP status answered."}, "status")
	return m, err
}
