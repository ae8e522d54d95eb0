package prefixdecider

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Conditional-decode outcomes (label values).
const (
	OutcomeForwarded = "forwarded"
	OutcomeRejected  = "rejected"
	OutcomeDisabled  = "gate_disabled"
)

// newOutcomes is the decider's counter of Prefer: if-available requests by outcome; Factory
// registers it on the EPP's registerer.
func newOutcomes() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_conditional_decode_total",
		Help: "Requests carrying Prefer: if-available, by target model and outcome (forwarded, rejected with 412, gate_disabled when nonCachedTokens=0).",
	}, []string{"model_name", "outcome"})
}

// CheckConditionalDecode implements contract.ConditionalDecodeGate: the EPP calls it for a
// Prefer: if-available request once decode is picked. It decides, counts the outcome and logs
// it with the numbers; the EPP answers 412 when it returns true.
func (d *Decider) CheckConditionalDecode(ctx context.Context, request *fwksched.LLMRequest, decodeEndpoint fwksched.Endpoint) bool {
	reject, reason := d.ShouldRejectConditionalDecode(ctx, request, decodeEndpoint)
	outcome := OutcomeForwarded
	switch {
	case reject:
		outcome = OutcomeRejected
	case d.params.NonCachedTokens == 0:
		outcome = OutcomeDisabled
	}
	model, id := "unknown", ""
	if request != nil {
		id = request.RequestId
		if request.TargetModel != "" {
			model = request.TargetModel
		}
	}
	d.outcomes.WithLabelValues(model, outcome).Inc()
	if l := pluginkit.DebugLogger(ctx); l.Enabled() {
		l.Info("conditional decode decision", "plugin", d.typedName.String(), "requestID", id, "outcome", outcome, "reason", reason)
	}
	return reject
}
