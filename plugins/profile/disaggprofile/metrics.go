package disaggprofile

import "github.com/prometheus/client_golang/prometheus"

// Decision types, the values of the decision_type label (llm-d's names).
const (
	DecisionDecodeOnly          = "decode-only"
	DecisionPrefillDecode       = "prefill-decode"
	DecisionEncodeDecode        = "encode-decode"
	DecisionEncodePrefillDecode = "encode-prefill-decode"
)

// newDisaggDecisions mirrors llm-d's llm_d_inference_scheduler_disagg_decision_total.
func newDisaggDecisions() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_disagg_decisions_total",
		Help: "Disaggregation decisions made by disagg-profile-handler, by target model and decision type (decode-only, prefill-decode, encode-decode, encode-prefill-decode).",
	}, []string{"model_name", "decision_type"})
}

// newPDDecisions mirrors llm-d's deprecated llm_d_inference_scheduler_pd_decision_total,
// recorded only by pd-profile-handler.
func newPDDecisions() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_pd_decisions_total",
		Help: "P/D decisions made by the deprecated pd-profile-handler, by target model and decision type (decode-only, prefill-decode).",
	}, []string{"model_name", "decision_type"})
}

// DecisionType names the decision for the stages used.
func DecisionType(encodeUsed, prefillUsed bool) string {
	switch {
	case encodeUsed && prefillUsed:
		return DecisionEncodePrefillDecode
	case encodeUsed:
		return DecisionEncodeDecode
	case prefillUsed:
		return DecisionPrefillDecode
	default:
		return DecisionDecodeOnly
	}
}

func modelLabel(model string) string {
	if model == "" {
		return "unknown"
	}
	return model
}
