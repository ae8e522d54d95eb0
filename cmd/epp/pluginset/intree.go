package pluginset

// The list mirrors the unexported registerInTreePlugins of GIE v1.5.0 cmd/epp/runner/runner.go
// (the runner offers no exported way to reuse it). Keep it in step when GIE is upgraded.

import (
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	extractormetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	sourcemetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/source/metrics"
	sourcenotifications "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/source/notifications"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/fairness"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/ordering"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/saturationdetector/concurrency"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/usagelimits"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/admitter/latencyslo"
	reqdataprodprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/requestattributereporter"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/requestdataproducer/inflightload"
	latencyproducer "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/requestdataproducer/predictedlatency"
	testresponsereceived "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/test/responsereceived"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/openai"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/passthrough"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requesthandling/parsers/vllmgrpc"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/filter/prefixcacheaffinity"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/filter/sloheadroomtier"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/picker"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/profile"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/kvcacheutilization"
	latencyscorer "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/latency"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/loraaffinity"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/predictedlatency"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/prefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/queuedepth"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/runningrequests"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/tokenload"
	testfilter "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/test/filter"
)

type registration struct {
	typeName string
	factory  fwkplugin.FactoryFunc
}

// ownedByPdgate are the types of GIE's runner that pdgate registers itself, under the same
// name, with the same parameters and semantics (plugins/pickers): GIE's pickers draw from a
// package-level, time-seeded random source, so a run could not be repeated for a seed.
// utilization-detector is GIE's plus llm-d v0.11's stalenessPolicy
// (plugins/flowcontrol/utilizationdetector).
var ownedByPdgate = []string{picker.MaxScorePickerType, picker.RandomPickerType, picker.WeightedRandomPickerType,
	utilization.UtilizationDetectorType}

var inTree = []registration{
	{typeName: prefix.PrefixCacheScorerPluginType, factory: prefix.PrefixCachePluginFactory},
	{typeName: profile.SingleProfileHandlerType, factory: profile.SingleProfileHandlerFactory},
	{typeName: kvcacheutilization.KvCacheUtilizationScorerType, factory: kvcacheutilization.KvCacheUtilizationScorerFactory},
	{typeName: queuedepth.QueueScorerType, factory: queuedepth.QueueScorerFactory},
	{typeName: runningrequests.RunningRequestsSizeScorerType, factory: runningrequests.RunningRequestsSizeScorerFactory},
	{typeName: loraaffinity.LoraAffinityScorerType, factory: loraaffinity.LoraAffinityScorerFactory},
	{typeName: tokenload.TokenLoadScorerType, factory: tokenload.TokenLoadScorerFactory},
	{typeName: fairness.GlobalStrictFairnessPolicyType, factory: fairness.GlobalStrictFairnessPolicyFactory},
	{typeName: fairness.RoundRobinFairnessPolicyType, factory: fairness.RoundRobinFairnessPolicyFactory},
	{typeName: ordering.FCFSOrderingPolicyType, factory: ordering.FCFSOrderingPolicyFactory},
	{typeName: ordering.EDFOrderingPolicyType, factory: ordering.EDFOrderingPolicyFactory},
	{typeName: ordering.SLODeadlineOrderingPolicyType, factory: ordering.SLODeadlineOrderingPolicyFactory},
	{typeName: usagelimits.StaticUsageLimitPolicyType, factory: usagelimits.StaticPolicyFactory},
	{typeName: reqdataprodprefix.ApproxPrefixCachePluginType, factory: reqdataprodprefix.ApproxPrefixCacheFactory},
	{typeName: predictedlatency.PredictedLatencyPluginType, factory: predictedlatency.PredictedLatencyFactory},
	{typeName: latencyproducer.LatencyDataProviderPluginType, factory: latencyproducer.PredictedLatencyFactory},
	{typeName: latencyslo.LatencyAdmissionPluginType, factory: latencyslo.LatencyAdmissionFactory},
	{typeName: prefixcacheaffinity.PluginType, factory: prefixcacheaffinity.Factory},
	{typeName: sloheadroomtier.PluginType, factory: sloheadroomtier.Factory},
	{typeName: latencyscorer.LatencyScorerType, factory: latencyscorer.Factory},
	{typeName: inflightload.InFlightLoadProducerType, factory: inflightload.InFlightLoadProducerFactory},
	{typeName: testfilter.HeaderBasedTestingFilterType, factory: testfilter.HeaderBasedTestingFilterFactory},
	{typeName: testresponsereceived.DestinationEndpointServedVerifierType, factory: testresponsereceived.DestinationEndpointServedVerifierFactory},
	{typeName: sourcemetrics.MetricsDataSourceType, factory: sourcemetrics.MetricsDataSourceFactory},
	{typeName: extractormetrics.MetricsExtractorType, factory: extractormetrics.CoreMetricsExtractorFactory},
	{typeName: sourcenotifications.NotificationSourceType, factory: sourcenotifications.NotificationSourceFactory},
	{typeName: sourcenotifications.EndpointNotificationSourceType, factory: sourcenotifications.EndpointSourceFactory},
	{typeName: requestattributereporter.RequestAttributeReporterType, factory: requestattributereporter.RequestAttributeReporterPluginFactory},
	{typeName: openai.OpenAIParserType, factory: openai.OpenAIParserPluginFactory},
	{typeName: vllmgrpc.VllmGRPCParserType, factory: vllmgrpc.VllmGRPCParserPluginFactory},
	{typeName: passthrough.PassthroughParserType, factory: passthrough.PassthroughParserPluginFactory},
	{typeName: concurrency.ConcurrencyDetectorType, factory: concurrency.ConcurrencyDetectorFactory},
}
