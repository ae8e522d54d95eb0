package llmd

import (
	"sync"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/flowcontrol"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	extractormetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	sourcemetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/source/metrics"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/fairness"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/ordering"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/usagelimits"
	reqdataprodprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/openai"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/picker"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/profile"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/prefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/queuedepth"

	"github.com/pdgate/pdgate/plugins"
)

var registerOnce sync.Once

// registerPlugins registers the GIE in-tree types the sample configs use or the loader
// injects, then every pdgate plugin.
func registerPlugins() {
	registerOnce.Do(func() {
		loader.RegisterFeatureGate(datalayer.ExperimentalDatalayerFeatureGate)
		loader.RegisterFeatureGate(datalayer.EnableLegacyMetricsFeatureGate)
		loader.RegisterFeatureGate(flowcontrol.FeatureGate)
		for typ, f := range map[string]fwkplugin.FactoryFunc{
			prefix.PrefixCacheScorerPluginType:            prefix.PrefixCachePluginFactory,
			picker.MaxScorePickerType:                     picker.MaxScorePickerFactory,
			profile.SingleProfileHandlerType:              profile.SingleProfileHandlerFactory,
			queuedepth.QueueScorerType:                    queuedepth.QueueScorerFactory,
			fairness.GlobalStrictFairnessPolicyType:       fairness.GlobalStrictFairnessPolicyFactory,
			ordering.FCFSOrderingPolicyType:               ordering.FCFSOrderingPolicyFactory,
			usagelimits.StaticUsageLimitPolicyType:        usagelimits.StaticPolicyFactory,
			reqdataprodprefix.ApproxPrefixCachePluginType: reqdataprodprefix.ApproxPrefixCacheFactory,
			sourcemetrics.MetricsDataSourceType:           sourcemetrics.MetricsDataSourceFactory,
			extractormetrics.MetricsExtractorType:         extractormetrics.CoreMetricsExtractorFactory,
			openai.OpenAIParserType:                       openai.OpenAIParserPluginFactory,
			utilization.UtilizationDetectorType:           utilization.UtilizationDetectorFactory,
		} {
			fwkplugin.Register(typ, f)
		}
		plugins.RegisterAll()
	})
}
