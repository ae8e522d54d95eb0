package core

import (
	"context"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/contract"
)

// orderDataDependencies is GIE's data-dependency check and PrepareData order, with pdgate's
// deciders placed in the layer they run in. GIE places a plugin by the GIE interfaces it
// implements; a contract.Decider that is nothing else (prefix-based-pd-decider) would land in
// GIE's "unknown" layer, before the PrepareData producers of what it reads, and be refused,
// though the profile handler calls it during scheduling, after every producer ran.
func orderDataDependencies(plugins []fwkplugin.Plugin) ([]string, error) {
	placed := make([]fwkplugin.Plugin, len(plugins))
	for i, p := range plugins {
		placed[i] = p
		c, isConsumer := p.(fwkplugin.ConsumerPlugin)
		if _, isDecider := p.(contract.Decider); isDecider && isConsumer && !hasGIELayer(p) {
			placed[i] = schedulingConsumer{c}
		}
	}
	return datalayer.ValidateAndOrderDataDependencies(placed)
}

func hasGIELayer(p fwkplugin.Plugin) bool {
	switch p.(type) {
	case fwkrc.PrepareDataPlugin, fwkrc.AdmissionPlugin, fwkrc.PreRequest, fwkrc.ResponseHeader,
		fwksched.ProfileHandler, fwksched.Filter, fwksched.Scorer, fwksched.Picker:
		return true
	}
	return false
}

// schedulingConsumer presents a decider to GIE's dependency check as what it is: a consumer
// that runs in the scheduling layer. It is never called.
type schedulingConsumer struct{ fwkplugin.ConsumerPlugin }

func (s schedulingConsumer) Filter(_ context.Context, _ *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) []fwksched.Endpoint {
	return eps
}
