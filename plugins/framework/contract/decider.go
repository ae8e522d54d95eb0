package contract

import (
	"context"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// Decider decides per request whether an optional stage (prefill or encode) runs, given the
// decode endpoint already picked. It receives the scheduling cycle's state, so a decider that
// made its choice earlier in the cycle (aibrix-pd-pair picks the pair in the decode profile)
// reads it there instead of keeping per-request tables. prefix-based-pd-decider,
// always-disagg-pd-decider, always-disagg-multimodal-decider and aibrix-pd-pair implement it.
type Decider interface {
	fwkplugin.Plugin
	Disaggregate(ctx context.Context, cs *fwksched.CycleState, request *fwksched.LLMRequest, decodeEndpoint fwksched.Endpoint) Decision
}

// Decision is a Decider's answer: whether the stage runs, the typed cause (metrics) and the
// numbers behind it (decision trace).
type Decision struct {
	Run    bool
	Cause  Cause
	Reason string
}

// ConditionalDecodeGate is the RFC 7240 "Prefer: if-available" gate. The EPP runs the first
// configured gate (IsConditionalDecodeGate) once per conditional request, after scheduling and
// before any PreRequest plugin, so a rejected request leaves no trace: nothing is charged, no
// prefix index learns a prompt the decode pod never received. prefix-based-pd-decider
// implements it.
type ConditionalDecodeGate interface {
	fwkplugin.Plugin
	IsConditionalDecodeGate() bool
	// CheckConditionalDecode decides for the decode pick, records the outcome metric and
	// log, and reports whether the request must be answered 412.
	CheckConditionalDecode(ctx context.Context, request *fwksched.LLMRequest, decodeEndpoint fwksched.Endpoint) bool
}

// FindConditionalDecodeGate returns the configured gate, if any.
func FindConditionalDecodeGate(plugins []fwkplugin.Plugin) ConditionalDecodeGate {
	for _, p := range plugins {
		if g, ok := p.(ConditionalDecodeGate); ok && g.IsConditionalDecodeGate() {
			return g
		}
	}
	return nil
}

// ProfileChecker is implemented by plugins that name scheduling profiles (the profile
// handlers). The EPP core calls CheckProfiles once the configured profiles are known, at start
// and in `pdgate validate` alike, so a config that cannot schedule a request is refused before
// it serves one. The error names the plugin and the profile.
type ProfileChecker interface {
	fwkplugin.Plugin
	CheckProfiles(configured []string) error
}
