package pluginset

import (
	"fmt"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

// referenceResolver is implemented by plugins that name other plugins in their parameters
// (the disagg profile handlers name their deciders). Plugins are created in list order, so a
// reference to a later plugin can only be checked once every plugin exists.
type referenceResolver interface {
	ResolveReferences(handle fwkplugin.Handle) error
}

// ResolveReferences checks every plugin's references to other plugins after the whole
// configuration is instantiated, so a misspelt name fails at startup, not on the first request.
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
	return nil
}
