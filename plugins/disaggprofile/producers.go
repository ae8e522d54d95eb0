package disaggprofile

import (
	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/prefix"
)

// EnsurePrefixProducer makes sure an approx-prefix-cache-producer exists for a plugin that reads
// PrefixCacheMatchInfo (llm-d registers it as the default producer of that key; GIE v1.5.0 only
// auto-creates it for prefix-cache-scorer). Readers call it from their factories. It does nothing when a producer is already
// declared, or when a prefix-cache-scorer is declared (GIE's loader then creates the producer
// after the plugin list, with the scorer's parameters). A prefix-cache-scorer declared after
// the consumer finds this default producer and its producer parameters are not applied:
// declare approx-prefix-cache-producer explicitly to tune it.
func EnsurePrefixProducer(handle fwkplugin.Handle) {
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
