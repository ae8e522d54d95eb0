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
		Help: "Requests answered by the EPP itself, by HTTP status and cause (a plugin's typed cause such as conditional_decode_miss or rate_limited, or gie_<Code> for GIE's own errors).",
	}, []string{"status", "cause"})
)

func init() {
	crmetrics.Registry.MustRegister(bodyRejected, immediateAnswers)
}
