// Package plugins registers every pdgate EPP plugin type with GIE's plugin registry.
//
// Each plugin lives in its own package under plugins/ and exposes its type name and factory;
// RegisterAll is the single place that wires them into fwkplugin.Registry. Binaries call it
// after GIE's in-tree plugins are registered so that no pdgate type is silently replaced.
package plugins

import (
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/alwaysdisagg"
	"github.com/pdgate/pdgate/plugins/burstprefix"
	"github.com/pdgate/pdgate/plugins/dataparallelprofile"
	"github.com/pdgate/pdgate/plugins/dcgmsource"
	"github.com/pdgate/pdgate/plugins/decodescorer"
	"github.com/pdgate/pdgate/plugins/disaggheaders"
	"github.com/pdgate/pdgate/plugins/disaggprofile"
	"github.com/pdgate/pdgate/plugins/endpointattrfilter"
	"github.com/pdgate/pdgate/plugins/endpointattrscorer"
	"github.com/pdgate/pdgate/plugins/enginemetrics"
	"github.com/pdgate/pdgate/plugins/fastparser"
	"github.com/pdgate/pdgate/plugins/inflightscorer"
	"github.com/pdgate/pdgate/plugins/labelselector"
	"github.com/pdgate/pdgate/plugins/loadawarescorer"
	"github.com/pdgate/pdgate/plugins/mmcacheproducer"
	"github.com/pdgate/pdgate/plugins/mmcachescorer"
	"github.com/pdgate/pdgate/plugins/nohitlru"
	"github.com/pdgate/pdgate/plugins/pdpair"
	"github.com/pdgate/pdgate/plugins/preciseproducer"
	"github.com/pdgate/pdgate/plugins/precisescorer"
	"github.com/pdgate/pdgate/plugins/prefillscorer"
	"github.com/pdgate/pdgate/plugins/prefixdecider"
	"github.com/pdgate/pdgate/plugins/prefixproducer"
	"github.com/pdgate/pdgate/plugins/probabilisticadmitter"
	"github.com/pdgate/pdgate/plugins/programawarefairness"
	"github.com/pdgate/pdgate/plugins/promptbucket"
	"github.com/pdgate/pdgate/plugins/ratecap"
	"github.com/pdgate/pdgate/plugins/rolefilter"
	"github.com/pdgate/pdgate/plugins/rolesetfilter"
	"github.com/pdgate/pdgate/plugins/softreflectiveceiling"
	"github.com/pdgate/pdgate/plugins/tokenledger"
	"github.com/pdgate/pdgate/plugins/tokenproducer"
	"github.com/pdgate/pdgate/plugins/topologyextractor"
	"github.com/pdgate/pdgate/plugins/topologyfilter"
	"github.com/pdgate/pdgate/plugins/topologyscorer"
)

// registration pairs a plugin type name with its factory.
type registration struct {
	typeName string
	factory  fwkplugin.FactoryFunc
}

// registrations lists every pdgate plugin type. Keep it sorted by type name.
var registrations = []registration{
	{typeName: decodescorer.Type, factory: decodescorer.Factory},
	{typeName: enginemetrics.Type, factory: enginemetrics.Factory},
	{typeName: pdpair.Type, factory: pdpair.Factory},
	{typeName: pdpair.PrefillFilterType, factory: pdpair.PrefillFilterFactory},
	{typeName: prefillscorer.Type, factory: prefillscorer.Factory},
	{typeName: ratecap.Type, factory: ratecap.Factory},
	{typeName: rolesetfilter.Type, factory: rolesetfilter.Factory},
	{typeName: alwaysdisagg.MultimodalType, factory: alwaysdisagg.MultimodalFactory},
	{typeName: alwaysdisagg.PDType, factory: alwaysdisagg.PDFactory},
	{typeName: labelselector.ByLabelType, factory: labelselector.ByLabelFactory},
	{typeName: labelselector.LegacySelectorType, factory: labelselector.LegacySelectorFactory},
	{typeName: rolefilter.DecodeType, factory: rolefilter.DecodeFactory},
	{typeName: disaggheaders.Type, factory: disaggheaders.Factory},
	{typeName: disaggprofile.HandlerType, factory: disaggprofile.HandlerFactory},
	{typeName: rolefilter.EncodeType, factory: rolefilter.EncodeFactory},
	{typeName: inflightscorer.Type, factory: inflightscorer.Factory},
	{typeName: labelselector.SelectorType, factory: labelselector.SelectorFactory},
	{typeName: disaggprofile.PDHandlerType, factory: disaggprofile.PDHandlerFactory},
	{typeName: tokenledger.Type, factory: tokenledger.Factory},
	{typeName: prefixproducer.Type, factory: prefixproducer.Factory},
	{typeName: fastparser.Type, factory: fastparser.Factory},
	{typeName: rolefilter.PrefillType, factory: rolefilter.PrefillFactory},
	{typeName: disaggheaders.LegacyType, factory: disaggheaders.LegacyFactory},
	{typeName: prefixdecider.Type, factory: prefixdecider.Factory},
	{typeName: preciseproducer.Type, factory: preciseproducer.Factory},
	{typeName: precisescorer.Type, factory: precisescorer.Factory},
	{typeName: promptbucket.Type, factory: promptbucket.Factory},
	{typeName: tokenproducer.Type, factory: tokenproducer.Factory},
	{typeName: tokenproducer.LegacyType, factory: tokenproducer.LegacyFactory},
	{typeName: loadawarescorer.Type, factory: loadawarescorer.Factory},
	{typeName: probabilisticadmitter.Type, factory: probabilisticadmitter.Factory},
	{typeName: topologyextractor.Type, factory: topologyextractor.Factory},
	{typeName: topologyfilter.Type, factory: topologyfilter.Factory},
	{typeName: topologyscorer.Type, factory: topologyscorer.Factory},
	{typeName: dataparallelprofile.Type, factory: dataparallelprofile.Factory},
	{typeName: dcgmsource.SourceType, factory: dcgmsource.SourceFactory},
	{typeName: dcgmsource.ExtractorType, factory: dcgmsource.ExtractorFactory},
	{typeName: endpointattrfilter.Type, factory: endpointattrfilter.Factory},
	{typeName: endpointattrscorer.Type, factory: endpointattrscorer.Factory},
	{typeName: programawarefairness.Type, factory: programawarefairness.Factory},
	{typeName: softreflectiveceiling.Type, factory: softreflectiveceiling.Factory},
	{typeName: burstprefix.Type, factory: burstprefix.Factory},
	{typeName: mmcacheproducer.Type, factory: mmcacheproducer.Factory},
	{typeName: mmcachescorer.Type, factory: mmcachescorer.Factory},
	{typeName: nohitlru.Type, factory: nohitlru.Factory},
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
