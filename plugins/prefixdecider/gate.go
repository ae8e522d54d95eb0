package prefixdecider

import (
	"context"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/disaggprofile"
	"github.com/pdgate/pdgate/plugins/protocol"
)

// PreconditionFailedBody is the 412 body, the text llm-d's EPP answers with.
const PreconditionFailedBody = protocol.ConditionalDecodeBody

// Conditional-decode outcomes (label values).
const (
	OutcomeForwarded = "forwarded"
	OutcomeRejected  = "rejected"
	OutcomeDisabled  = "gate_disabled"
)

var (
	// ConditionalDecodeOutcomes counts Prefer: if-available requests by outcome.
	ConditionalDecodeOutcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_conditional_decode_total",
		Help: "Requests carrying Prefer: if-available, by target model and outcome (forwarded, rejected with 412, gate_disabled when nonCachedTokens=0).",
	}, []string{"model_name", "outcome"})
	registerOnce sync.Once
)

// RegisterMetrics registers the package's collectors with controller-runtime's registry.
func RegisterMetrics() {
	registerOnce.Do(func() { crmetrics.Registry.MustRegister(ConditionalDecodeOutcomes) })
}

// PreRequest is the conditional-decode gate for profile handlers that do not run it at
// scheduling time (disagg-profile-handler and pd-profile-handler do, see
// CheckConditionalDecode). On a Prefer: if-available request, when this instance is the gate and
// the decode pick does not hold enough of the prompt, it asks the EPP's ext_proc server to
// answer 412 (protocol.HeaderImmediateStatus / HeaderImmediateBody) instead of forwarding.
func (d *Decider) PreRequest(ctx context.Context, request *fwksched.LLMRequest, result *fwksched.SchedulingResult) {
	if request == nil || !protocol.IsConditionalDecode(headerFold(request.Headers, protocol.HeaderPrefer)) {
		return
	}
	if _, checked := request.Headers[disaggprofile.HeaderConditionalDecodeChecked]; checked {
		delete(request.Headers, disaggprofile.HeaderConditionalDecodeChecked)
		return // the profile handler already ran the gate before scheduling finished
	}
	if !d.gate {
		log.FromContext(ctx).V(1).Info("conditional decode: not the gate (the first prefix-based-pd-decider in the config is)",
			"plugin", d.typedName.String(), "requestID", request.RequestId)
		return
	}
	if d.CheckConditionalDecode(ctx, request, primaryEndpoint(result)) {
		request.Headers[protocol.HeaderImmediateStatus] = "412"
		request.Headers[protocol.HeaderImmediateBody] = PreconditionFailedBody
	}
}

// CheckConditionalDecode implements disaggprofile.ConditionalDecodeGate: it decides for the
// decode pick, counts the outcome and logs it with the numbers.
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
	ConditionalDecodeOutcomes.WithLabelValues(model, outcome).Inc()
	log.FromContext(ctx).V(1).Info("conditional decode decision", "plugin", d.typedName.String(), "requestID", id,
		"outcome", outcome, "reason", reason)
	return reject
}

func primaryEndpoint(result *fwksched.SchedulingResult) fwksched.Endpoint {
	if result == nil {
		return nil
	}
	r := result.ProfileResults[result.PrimaryProfileName]
	if r == nil || len(r.TargetEndpoints) == 0 {
		return nil
	}
	return r.TargetEndpoints[0]
}

func headerFold(h map[string]string, key string) string {
	if v, ok := h[key]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, key) {
			return v
		}
	}
	return ""
}
