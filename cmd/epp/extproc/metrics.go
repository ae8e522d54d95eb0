package extproc

import (
	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	bodyRejected = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "pdgate_epp_request_body_rejected_total",
		Help: "Requests answered 413 because the body exceeded --max-request-body-bytes.",
	})
	immediateAnswers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_epp_immediate_responses_total",
		Help: "Requests answered by the EPP itself on a plugin's request (e.g. 412 conditional decode, 429 rate cap), by HTTP status.",
	}, []string{"status"})
	statusRewrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_epp_error_status_rewrites_total",
		Help: "GIE error answers whose status was rewritten from a pdgate status marker, by new HTTP status.",
	}, []string{"status"})
)

func init() {
	crmetrics.Registry.MustRegister(bodyRejected, immediateAnswers, statusRewrites)
}
