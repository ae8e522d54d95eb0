package pluginset

import (
	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/prefix"
)

// ensurePrefixProducer makes sure an approx-prefix-cache-producer exists for the plugins that
// read PrefixCacheMatchInfo (llm-d registers it as the default producer of that key; GIE v1.5.0
// only auto-creates it for prefix-cache-scorer). It runs once the whole plugin list is
// instantiated, so a declared producer, or the one GIE's loader created with
// prefix-cache-scorer's parameters, is found wherever it is declared; then it does nothing.
func ensurePrefixProducer(handle fwkplugin.Handle) {
	if handle == nil {
		return
	}
	for _, p := range handle.GetAllPlugins() {
		switch p.TypedName().Type {
		case approximateprefix.ApproxPrefixCachePluginType, prefix.PrefixCacheScorerPluginType:
			return
		}
	}
	p, err := approximateprefix.ApproxPrefixCacheFactory(approximateprefix.ApproxPrefixCachePluginType, nil, handle)
	if err != nil {
		// Defaults cannot fail validation; log rather than fail the consumer.
		log.FromContext(handle.Context()).Error(err, "could not auto-create approx-prefix-cache-producer")
		return
	}
	handle.AddPlugin(approximateprefix.ApproxPrefixCachePluginType, p)
	log.FromContext(handle.Context()).V(1).Info("auto-created approx-prefix-cache-producer for PrefixCacheMatchInfo consumers")
}
