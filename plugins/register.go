// Package plugins registers every pdgate EPP plugin type with GIE's plugin registry.
//
// Each plugin lives in its own package under plugins/ and exposes its type name and factory;
// RegisterAll is the single place that wires them into fwkplugin.Registry. Binaries call it
// after GIE's in-tree plugins are registered so that no pdgate type is silently replaced.
package plugins

import (
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/aibrix/aibrixdecodescorer"
	"github.com/pdgate/pdgate/plugins/aibrix/aibrixenginemetrics"
	"github.com/pdgate/pdgate/plugins/aibrix/aibrixpdpair"
	"github.com/pdgate/pdgate/plugins/aibrix/aibrixprefillscorer"
	"github.com/pdgate/pdgate/plugins/aibrix/aibrixratecap"
	"github.com/pdgate/pdgate/plugins/aibrix/aibrixrolesetfilter"
	"github.com/pdgate/pdgate/plugins/datalayer/burstprefix"
	"github.com/pdgate/pdgate/plugins/datalayer/dcgmsource"
	"github.com/pdgate/pdgate/plugins/datalayer/labelproducer"
	"github.com/pdgate/pdgate/plugins/datalayer/mmcacheproducer"
	"github.com/pdgate/pdgate/plugins/datalayer/prefixproducer"
	"github.com/pdgate/pdgate/plugins/datalayer/tokenproducer"
	"github.com/pdgate/pdgate/plugins/datalayer/topologyextractor"
	"github.com/pdgate/pdgate/plugins/deciders/alwaysdisagg"
	"github.com/pdgate/pdgate/plugins/deciders/prefixdecider"
	"github.com/pdgate/pdgate/plugins/filters/endpointattrfilter"
	"github.com/pdgate/pdgate/plugins/filters/handoffcompatfilter"
	"github.com/pdgate/pdgate/plugins/filters/labelselector"
	"github.com/pdgate/pdgate/plugins/filters/promptbucket"
	"github.com/pdgate/pdgate/plugins/filters/rolefilter"
	"github.com/pdgate/pdgate/plugins/filters/topologyfilter"
	"github.com/pdgate/pdgate/plugins/flowcontrol/maxsaturationdetector"
	"github.com/pdgate/pdgate/plugins/flowcontrol/programawarefairness"
	"github.com/pdgate/pdgate/plugins/flowcontrol/softreflectiveceiling"
	"github.com/pdgate/pdgate/plugins/flowcontrol/utilizationdetector"
	"github.com/pdgate/pdgate/plugins/latency/latencyobservation"
	"github.com/pdgate/pdgate/plugins/latency/latencyobserver"
	"github.com/pdgate/pdgate/plugins/parser/openaiparser"
	"github.com/pdgate/pdgate/plugins/pickers/maxscorepicker"
	"github.com/pdgate/pdgate/plugins/pickers/randompicker"
	"github.com/pdgate/pdgate/plugins/pickers/weightedrandompicker"
	"github.com/pdgate/pdgate/plugins/precise/preciseproducer"
	"github.com/pdgate/pdgate/plugins/precise/precisescorer"
	"github.com/pdgate/pdgate/plugins/profile/dataparallelprofile"
	"github.com/pdgate/pdgate/plugins/profile/disaggprofile"
	"github.com/pdgate/pdgate/plugins/profile/headerprofile"
	"github.com/pdgate/pdgate/plugins/requestcontrol/disaggheaders"
	"github.com/pdgate/pdgate/plugins/requestcontrol/forecastadmitter"
	"github.com/pdgate/pdgate/plugins/requestcontrol/outlenbucket"
	"github.com/pdgate/pdgate/plugins/requestcontrol/pdratioadvisor"
	"github.com/pdgate/pdgate/plugins/requestcontrol/pdtokenledger"
	"github.com/pdgate/pdgate/plugins/requestcontrol/probabilisticadmitter"
	"github.com/pdgate/pdgate/plugins/scorers/endpointattrscorer"
	"github.com/pdgate/pdgate/plugins/scorers/endpointattrweightscorer"
	"github.com/pdgate/pdgate/plugins/scorers/inflightscorer"
	"github.com/pdgate/pdgate/plugins/scorers/loadawarescorer"
	"github.com/pdgate/pdgate/plugins/scorers/mmcachescorer"
	"github.com/pdgate/pdgate/plugins/scorers/nohitlru"
	"github.com/pdgate/pdgate/plugins/scorers/topologyscorer"
	"github.com/pdgate/pdgate/plugins/sessionaffinity/sessionaffinityfilter"
	"github.com/pdgate/pdgate/plugins/sessionaffinity/sessionaffinityscorer"
)

// registration pairs a plugin type name with its factory.
type registration struct {
	typeName string
	factory  fwkplugin.FactoryFunc
}

// registrations lists every pdgate plugin type. Keep it sorted by type name.
var registrations = []registration{
	{typeName: aibrixdecodescorer.Type, factory: aibrixdecodescorer.Factory},
	{typeName: aibrixenginemetrics.Type, factory: aibrixenginemetrics.Factory},
	{typeName: aibrixpdpair.Type, factory: aibrixpdpair.Factory},
	{typeName: aibrixpdpair.PrefillFilterType, factory: aibrixpdpair.PrefillFilterFactory},
	{typeName: aibrixprefillscorer.Type, factory: aibrixprefillscorer.Factory},
	{typeName: aibrixratecap.Type, factory: aibrixratecap.Factory},
	{typeName: aibrixrolesetfilter.Type, factory: aibrixrolesetfilter.Factory},
	{typeName: alwaysdisagg.MultimodalType, factory: alwaysdisagg.MultimodalFactory},
	{typeName: alwaysdisagg.PDType, factory: alwaysdisagg.PDFactory},
	{typeName: burstprefix.Type, factory: burstprefix.Factory},
	{typeName: labelselector.ByLabelType, factory: labelselector.ByLabelFactory},
	{typeName: labelselector.LegacySelectorType, factory: labelselector.LegacySelectorFactory},
	{typeName: dataparallelprofile.Type, factory: dataparallelprofile.Factory},
	{typeName: dcgmsource.SourceType, factory: dcgmsource.SourceFactory},
	{typeName: dcgmsource.ExtractorType, factory: dcgmsource.ExtractorFactory},
	{typeName: rolefilter.DecodeType, factory: rolefilter.DecodeFactory},
	{typeName: disaggheaders.Type, factory: disaggheaders.Factory},
	{typeName: disaggprofile.HandlerType, factory: disaggprofile.HandlerFactory},
	{typeName: rolefilter.EncodeType, factory: rolefilter.EncodeFactory},
	{typeName: endpointattrfilter.Type, factory: endpointattrfilter.Factory},
	{typeName: endpointattrscorer.Type, factory: endpointattrscorer.Factory},
	{typeName: endpointattrweightscorer.Type, factory: endpointattrweightscorer.Factory},
	{typeName: forecastadmitter.Type, factory: forecastadmitter.Factory},
	{typeName: handoffcompatfilter.Type, factory: handoffcompatfilter.Factory},
	{typeName: headerprofile.PhaseType, factory: headerprofile.PhaseFactory},
	{typeName: headerprofile.Type, factory: headerprofile.Factory},
	{typeName: inflightscorer.Type, factory: inflightscorer.Factory},
	{typeName: labelproducer.Type, factory: labelproducer.Factory},
	{typeName: labelselector.SelectorType, factory: labelselector.SelectorFactory},
	{typeName: latencyobservation.Type, factory: latencyobservation.Factory},
	{typeName: latencyobserver.Type, factory: latencyobserver.Factory},
	{typeName: loadawarescorer.Type, factory: loadawarescorer.Factory},
	{typeName: maxsaturationdetector.Type, factory: maxsaturationdetector.Factory},
	{typeName: maxscorepicker.Type, factory: maxscorepicker.Factory},
	{typeName: mmcacheproducer.Type, factory: mmcacheproducer.Factory},
	{typeName: mmcachescorer.Type, factory: mmcachescorer.Factory},
	{typeName: nohitlru.Type, factory: nohitlru.Factory},
	{typeName: outlenbucket.Type, factory: outlenbucket.Factory},
	{typeName: disaggprofile.PDHandlerType, factory: disaggprofile.PDHandlerFactory},
	{typeName: pdratioadvisor.Type, factory: pdratioadvisor.Factory},
	{typeName: pdtokenledger.Type, factory: pdtokenledger.Factory},
	{typeName: openaiparser.Type, factory: openaiparser.Factory},
	{typeName: prefixproducer.Type, factory: prefixproducer.Factory},
	{typeName: preciseproducer.Type, factory: preciseproducer.Factory},
	{typeName: precisescorer.Type, factory: precisescorer.Factory},
	{typeName: rolefilter.PrefillType, factory: rolefilter.PrefillFactory},
	{typeName: disaggheaders.LegacyType, factory: disaggheaders.LegacyFactory},
	{typeName: prefixdecider.Type, factory: prefixdecider.Factory},
	{typeName: probabilisticadmitter.Type, factory: probabilisticadmitter.Factory},
	{typeName: programawarefairness.Type, factory: programawarefairness.Factory},
	{typeName: promptbucket.Type, factory: promptbucket.Factory},
	{typeName: randompicker.Type, factory: randompicker.Factory},
	{typeName: sessionaffinityfilter.Type, factory: sessionaffinityfilter.Factory},
	{typeName: sessionaffinityscorer.Type, factory: sessionaffinityscorer.Factory},
	{typeName: softreflectiveceiling.Type, factory: softreflectiveceiling.Factory},
	{typeName: tokenproducer.Type, factory: tokenproducer.Factory},
	{typeName: tokenproducer.LegacyType, factory: tokenproducer.LegacyFactory},
	{typeName: topologyfilter.Type, factory: topologyfilter.Factory},
	{typeName: topologyscorer.Type, factory: topologyscorer.Factory},
	{typeName: topologyextractor.Type, factory: topologyextractor.Factory},
	{typeName: utilizationdetector.Type, factory: utilizationdetector.Factory},
	{typeName: weightedrandompicker.Type, factory: weightedrandompicker.Factory},
}

// RegisterAll registers every pdgate plugin type with GIE's registry.
func RegisterAll() {
	for _, r := range registrations {
		fwkplugin.Register(r.typeName, r.factory)
	}
}

// TypeNames returns the registered pdgate plugin type names, in registration order.
func TypeNames() []string {
	names := make([]string, len(registrations))
	for i, r := range registrations {
		names[i] = r.typeName
	}
	return names
}
