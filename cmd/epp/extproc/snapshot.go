package extproc

import (
	"fmt"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// snapshotEndpoint is one endpoint as one request's scheduling cycle sees it. GIE's director
// builds it with fwksched.NewEndpoint, which deep-copies the metadata (labels included) and
// the metrics of every endpoint on every request. Both are published copy-on-write: the
// datastore, the metrics extractors and the endpoints file store a new value
// (UpdateMetadata / UpdateMetrics) and never change one in place, and no plugin writes them.
// So the snapshot shares them and copies only the attributes, which PrepareData plugins write
// per request.
type snapshotEndpoint struct {
	*fwkdl.EndpointMetadata
	*fwkdl.Metrics
	fwkdl.AttributeMap
}

var _ fwksched.Endpoint = (*snapshotEndpoint)(nil)

func newSnapshotEndpoint(ep fwkdl.Endpoint) fwksched.Endpoint {
	attrs := ep.GetAttributes()
	if attrs == nil {
		attrs = fwkdl.NewAttributes()
	}
	return &snapshotEndpoint{EndpointMetadata: ep.GetMetadata(), Metrics: ep.GetMetrics(), AttributeMap: attrs.Clone()}
}

func (e *snapshotEndpoint) GetMetadata() *fwkdl.EndpointMetadata { return e.EndpointMetadata }
func (e *snapshotEndpoint) GetMetrics() *fwkdl.Metrics           { return e.Metrics }
func (e *snapshotEndpoint) Clone() fwkdl.AttributeMap            { return e.AttributeMap.Clone() }

// String prints the metadata and metrics (GIE's endpoint prints its three pointers).
func (e *snapshotEndpoint) String() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("{EndpointMetadata:%+v Metrics:%+v}", e.EndpointMetadata, e.Metrics)
}
