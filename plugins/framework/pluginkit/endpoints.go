package pluginkit

import (
	"context"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// EndpointLister returns the pool's endpoints now: metadata (address, port, labels),
// scraped metrics and attributes.
type EndpointLister func() []fwkdl.Endpoint

type endpointsKey struct{}

// WithEndpoints returns ctx carrying list, the pool's endpoint list. GIE's handle offers
// only the endpoints' names (PodList); a plugin that must map what an engine says about
// itself (an address in a KV-event topic) to a pool endpoint, or notice that an endpoint
// left the pool without waiting for a request, reads the endpoints here. The EPP sets it
// from its datastore before it creates the handle.
func WithEndpoints(ctx context.Context, list EndpointLister) context.Context {
	return context.WithValue(ctx, endpointsKey{}, list)
}

// EndpointsOf returns the endpoint list on ctx, or nil when the context carries none (a
// plugin built without an EPP, bench sim's in-process fleet).
func EndpointsOf(ctx context.Context) EndpointLister {
	if l, ok := ctx.Value(endpointsKey{}).(EndpointLister); ok {
		return l
	}
	return nil
}

// EndpointName is how plugins name an endpoint in logs, errors and decision traces: its
// NamespacedName's name, "<nil>" when there is no endpoint or it carries no metadata.
func EndpointName(ep fwksched.Endpoint) string {
	if ep == nil || ep.GetMetadata() == nil {
		return "<nil>"
	}
	return ep.GetMetadata().NamespacedName.Name
}
