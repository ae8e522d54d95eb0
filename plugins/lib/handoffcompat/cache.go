package handoffcompat

import (
	"sync"
	"sync/atomic"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
)

// cacheLimit bounds a Cache: past it the cache starts over (old metadata objects are then
// released), which a fleet reaches only through pod churn.
const cacheLimit = 4096

// Cache memoises Of per endpoint metadata object. The EPP publishes metadata copy-on-write (a
// pod's change stores a new object; see cmd/epp/extproc's snapshot), so one pointer always
// names one set of labels, and a plugin reading every candidate of every request hashes each
// pod's labels once instead of per request. Safe for concurrent use; the zero Cache is ready.
type Cache struct {
	m       sync.Map // *fwkdl.EndpointMetadata → *Spec, interned
	interns sync.Map // Spec → *Spec
	n       atomic.Int64
}

// none is the interned empty Spec.
var none = &Spec{}

// Of is Of(md.Labels), remembered; the empty Spec for nil metadata.
func (c *Cache) Of(md *fwkdl.EndpointMetadata) Spec { return *c.Ref(md) }

// Ref is Of, interned: pods declaring equal specs get the same pointer, so a caller comparing
// a fleet's pods compares pointers. The Spec must not be modified.
func (c *Cache) Ref(md *fwkdl.EndpointMetadata) *Spec {
	if md == nil {
		return none
	}
	if s, ok := c.m.Load(md); ok {
		return s.(*Spec)
	}
	s, _ := Of(md.Labels)
	ref := none
	if !s.Empty() {
		v, _ := c.interns.LoadOrStore(s, &s)
		ref = v.(*Spec)
	}
	if c.n.Add(1) > cacheLimit {
		c.m.Clear()
		c.interns.Clear()
		c.n.Store(1)
	}
	c.m.Store(md, ref)
	return ref
}
