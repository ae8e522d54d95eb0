package pluginset

import (
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/log"
	configapi "sigs.k8s.io/gateway-api-inference-extension/apix/config/v1alpha1"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/prefix"

	"github.com/pdgate/pdgate/plugins/datalayer/prefixproducer"
)

// ensurePrefixProducer makes sure a producer of PrefixCacheMatchInfo exists for the plugins
// that read it (llm-d registers approx-prefix-cache-producer as the default producer of that
// key; GIE v1.5.0 only auto-creates it for prefix-cache-scorer). The default pdgate adds is
// pdgate-prefix-cache-producer: GIE's producer's parameters, defaults, index and matching,
// hashing the prompt without re-marshalling the chat messages. It runs once the whole plugin
// list is instantiated, so a declared producer of the key (GIE's approx-prefix-cache-producer
// included: users' configs are honoured), or the one GIE's loader created with
// prefix-cache-scorer's parameters, is found wherever it is declared; then it does nothing.
func ensurePrefixProducer(handle fwkplugin.Handle) {
	if handle == nil {
		return
	}
	for _, p := range handle.GetAllPlugins() {
		if p.TypedName().Type == prefix.PrefixCacheScorerPluginType {
			return
		}
		if pr, ok := p.(fwkplugin.ProducerPlugin); ok {
			if _, ok := pr.Produces()[attrprefix.PrefixCacheMatchInfoKey]; ok {
				return
			}
		}
	}
	handle.AddPlugin(prefixproducer.AutoName, prefixproducer.New(prefixproducer.AutoName, prefixproducer.DefaultParameters(), handle))
	log.FromContext(handle.Context()).V(1).Info("auto-created pdgate-prefix-cache-producer for PrefixCacheMatchInfo consumers")
}

// AddPrefixCacheScorerProducer gives prefix-cache-scorer the producer GIE's loader would
// create for it (approx-prefix-cache-producer, with the scorer's parameters), built by
// pdgate-prefix-cache-producer under GIE's type and name. It must run before the loader
// instantiates the configuration: the loader then finds a producer of that type and does not
// create GIE's, which JSON-marshals every request's chat messages (half of the EPP's CPU per
// request on a 220 KB chat). A configuration that declares approx-prefix-cache-producer itself
// keeps GIE's.
func AddPrefixCacheScorerProducer(raw *configapi.EndpointPickerConfig, handle fwkplugin.Handle) error {
	var scorer *configapi.PluginSpec
	for i, spec := range raw.Plugins {
		switch spec.Type {
		case prefixproducer.GIEType:
			return nil
		case prefix.PrefixCacheScorerPluginType:
			if scorer == nil {
				scorer = &raw.Plugins[i]
			}
		}
	}
	if scorer == nil {
		return nil
	}
	p, err := prefixproducer.NewPrefixCacheScorerProducer(scorer.Parameters, handle)
	if err != nil {
		return fmt.Errorf("plugin '%s' (type: %s): %w", scorer.Name, scorer.Type, err)
	}
	handle.AddPlugin(prefixproducer.GIEType, p)
	return nil
}
