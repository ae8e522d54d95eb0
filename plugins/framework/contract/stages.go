package contract

import (
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// StageClassifier is implemented by P/D deciders so that the EPP's admission, which runs before
// the scheduler, can judge a request on the stages it will need: a request the decider will keep
// decode-only needs a decode slot and nothing else, so a saturated prefill tier must not shed it.
type StageClassifier interface {
	// DecodeOnlyAtAdmission reports whether the decider keeps req decode-only whichever pod
	// serves it and whatever the caches hold; false whenever that depends on the pick.
	DecodeOnlyAtAdmission(req *fwksched.LLMRequest) bool
}

// StageClassifiers returns the plugins that classify requests by stage, in order.
func StageClassifiers(plugins []fwkplugin.Plugin) []StageClassifier {
	return implementing[StageClassifier](plugins)
}

// DecodeOnlyAtAdmission reports whether every classifier keeps req decode-only whatever the
// pick: only then does the request need no prefill leg. No classifiers: false (a P/D request
// may need one).
func DecodeOnlyAtAdmission(classifiers []StageClassifier, req *fwksched.LLMRequest) bool {
	if len(classifiers) == 0 || req == nil {
		return false
	}
	for _, c := range classifiers {
		if !c.DecodeOnlyAtAdmission(req) {
			return false
		}
	}
	return true
}

// implementing returns the plugins that implement T, in order.
func implementing[T any](plugins []fwkplugin.Plugin) []T {
	var out []T
	for _, p := range plugins {
		if t, ok := p.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

// SaturationGateReplacer is implemented by an admission plugin that decides, per request, what
// the EPP's pool-level saturation gate would otherwise decide (forecast-admitter): with one
// configured, the legacy admission check stops shedding on saturation (it still answers an
// unknown model 404 and a pool without endpoints 503), so the two never shed the same overload
// twice.
type SaturationGateReplacer interface {
	ReplacesSaturationGate() bool
}

// ReplacesSaturationGate reports whether one of the plugins replaces the saturation gate.
func ReplacesSaturationGate(plugins []fwkplugin.Plugin) bool {
	for _, r := range implementing[SaturationGateReplacer](plugins) {
		if r.ReplacesSaturationGate() {
			return true
		}
	}
	return false
}
