package pluginset

import (
	"fmt"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/datalayer/tokenproducer"
	"github.com/pdgate/pdgate/plugins/framework/contract"
)

// referenceResolver is implemented by plugins that name other plugins in their parameters
// (the disagg profile handlers name their deciders). Plugins are created in list order, so a
// reference to a later plugin can only be checked once every plugin exists.
type referenceResolver interface {
	ResolveReferences(handle fwkplugin.Handle) error
}

// ResolveReferences checks every plugin's references to other plugins after the whole
// configuration is instantiated, so a misspelt name fails at startup, not on the first request,
// and then adds the default producers the configuration's consumers need.
func ResolveReferences(handle fwkplugin.Handle) error {
	for _, p := range handle.GetAllPlugins() {
		r, ok := p.(referenceResolver)
		if !ok {
			continue
		}
		if err := r.ResolveReferences(handle); err != nil {
			return fmt.Errorf("plugin '%s': %w", p.TypedName().Name, err)
		}
	}
	ensureDefaultProducers(handle)
	return nil
}

// defaultProducers are the producers llm-d registers as the defaults of the keys they fill:
// when a configured plugin consumes the key and nothing produces it, the EPP adds one.
// (GIE v1.5.0's loader creates approx-prefix-cache-producer only for prefix-cache-scorer, so
// GIE's prefix-cache-affinity filter or latency scorer alone would read nothing.) Running after
// the whole list is instantiated, this sees every declared producer, wherever it is declared,
// and GIE's loader has already created the prefix producer with prefix-cache-scorer's
// parameters when that scorer is configured.
var defaultProducers = map[string]func(fwkplugin.Handle){
	attrprefix.PrefixCacheMatchInfoKey: ensurePrefixProducer,
	contract.TokenizedPromptKey:        tokenproducer.EnsureProducer,
}

func ensureDefaultProducers(handle fwkplugin.Handle) {
	needed := map[string]bool{}
	for _, p := range handle.GetAllPlugins() {
		if c, ok := p.(fwkplugin.ConsumerPlugin); ok {
			for key := range c.Consumes() {
				needed[key] = true
			}
		}
	}
	for key, ensure := range defaultProducers {
		if needed[key] {
			ensure(handle)
		}
	}
}
