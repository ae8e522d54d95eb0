package podmodel

import (
	"sync"
	"sync/atomic"

	"github.com/go-logr/logr"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
)

// cacheLimit bounds a Cache: past it the cache starts over (old metadata objects are then
// released), which a fleet reaches only through pod churn.
const cacheLimit = 4096

// Cache memoises FromMetadata per endpoint metadata object, for a plugin that resolves every
// candidate of every request. The EPP publishes metadata copy-on-write (a pod's change stores
// a new object, see cmd/epp/extproc's snapshot), so one pointer always names one set of
// labels; resolving anew built each pod's key string on every request, and Report's checks
// ran again for problems already logged. Safe for concurrent use; the zero Cache is ready.
//
// Pods from a Cache share their Invalid slice and Config with the cached record, as pods
// resolved from one annotation already share its Config: both are read-only.
type Cache struct {
	m sync.Map // *fwkdl.EndpointMetadata → *Pod, Endpoint unset
	n atomic.Int64
}

// FromEndpoints is FromEndpoints through the cache: a pod's invalid annotations are
// reported when its metadata object is first resolved.
func (c *Cache) FromEndpoints(log logr.Logger, eps []fwkEndpoint) []Pod {
	return c.AppendFromEndpoints(make([]Pod, 0, len(eps)), log, eps)
}

// AppendFromEndpoints is FromEndpoints appending to dst, for a caller that reuses a buffer.
func (c *Cache) AppendFromEndpoints(dst []Pod, log logr.Logger, eps []fwkEndpoint) []Pod {
	for _, ep := range eps {
		dst = append(dst, c.FromEndpoint(log, ep))
	}
	return dst
}

// FromEndpoint is FromEndpoint through the cache.
func (c *Cache) FromEndpoint(log logr.Logger, ep fwkEndpoint) Pod {
	if ep == nil {
		return Pod{}
	}
	p := *c.of(log, ep.GetMetadata())
	p.Endpoint = ep
	return p
}

var noPod = &Pod{}

func (c *Cache) of(log logr.Logger, md *fwkdl.EndpointMetadata) *Pod {
	if md == nil {
		return noPod
	}
	if p, ok := c.m.Load(md); ok {
		return p.(*Pod)
	}
	p := FromMetadata(md)
	Report(log, p)
	if c.n.Add(1) > cacheLimit {
		c.m.Clear()
		c.n.Store(1)
	}
	c.m.Store(md, &p)
	return &p
}
