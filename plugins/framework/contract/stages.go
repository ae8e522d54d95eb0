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
