package pluginset

import (
	"fmt"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/disaggprofile"
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

// ensureDefaultProducers adds approx-prefix-cache-producer when a plugin consumes
// PrefixCacheMatchInfo and nothing produces it, as llm-d does by registering it as that key's
// default producer (GIE v1.5.0's loader creates it only for prefix-cache-scorer, so GIE's
// prefix-cache-affinity filter or latency scorer alone would read nothing).
func ensureDefaultProducers(handle fwkplugin.Handle) {
	for _, p := range handle.GetAllPlugins() {
		c, ok := p.(fwkplugin.ConsumerPlugin)
		if !ok {
			continue
		}
		if _, reads := c.Consumes()[attrprefix.PrefixCacheMatchInfoKey]; reads {
			disaggprofile.EnsurePrefixProducer(handle)
			return
		}
	}
}
