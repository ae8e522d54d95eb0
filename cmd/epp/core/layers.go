package core

import (
	"context"
	"fmt"
	"reflect"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
)

// orderDataDependencies is GIE's data-dependency check and PrepareData order, with pdgate's
// deciders placed in the layer they run in. GIE places a plugin by the GIE interfaces it
// implements; a contract.Decider that is nothing else (prefix-based-pd-decider) would land in
// GIE's "unknown" layer, before the PrepareData producers of what it reads, and be refused,
// though the profile handler calls it during scheduling, after every producer ran.
func orderDataDependencies(plugins []fwkplugin.Plugin) ([]string, error) {
	if err := checkComparableDeclarations(plugins); err != nil {
		return nil, err
	}
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

// checkComparableDeclarations refuses a producer/consumer pair whose declarations for a key
// they share cannot be compared with ==: GIE's check compares them with != and panics on such a
// value (a struct holding a map), taking `pdgate validate` and the EPP down with it instead of
// naming the plugin. Keys that only one side declares are never compared, so they are not
// checked (GIE's lora-affinity-scorer declares a map it alone uses).
func checkComparableDeclarations(plugins []fwkplugin.Plugin) error {
	produced := map[string]bool{}
	for _, p := range plugins {
		if pr, ok := p.(fwkplugin.ProducerPlugin); ok {
			for key := range pr.Produces() {
				produced[key] = true
			}
		}
	}
	consumed := map[string]bool{}
	for _, p := range plugins {
		if c, ok := p.(fwkplugin.ConsumerPlugin); ok {
			for key := range c.Consumes() {
				consumed[key] = true
			}
		}
	}
	for _, p := range plugins {
		var decls []map[string]any
		if pr, ok := p.(fwkplugin.ProducerPlugin); ok {
			decls = append(decls, pr.Produces())
		}
		if c, ok := p.(fwkplugin.ConsumerPlugin); ok {
			decls = append(decls, c.Consumes())
		}
		for _, m := range decls {
			for key, v := range m {
				if produced[key] && consumed[key] && v != nil && !reflect.TypeOf(v).Comparable() {
					return fmt.Errorf("plugin %s declares data key %q with a value of type %T, which cannot be compared; declare a comparable value such as a typed nil pointer",
						p.TypedName(), key, v)
				}
			}
		}
	}
	return nil
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
