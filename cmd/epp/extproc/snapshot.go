package extproc

import (
	"fmt"
	"slices"
	"sync"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"
)

// snapshotEndpoint is one endpoint as one request's scheduling cycle sees it. GIE's director
// builds it with fwksched.NewEndpoint, which deep-copies the metadata (labels included) and
// the metrics of every endpoint on every request. Both are published copy-on-write: the
// datastore, the metrics extractors and the endpoints file store a new value
// (UpdateMetadata / UpdateMetrics) and never change one in place, and no plugin writes them.
// So the snapshot shares them, and its attributes are snapshotAttributes: what PrepareData
// plugins write for this request, over the endpoint's own attributes.
type snapshotEndpoint struct {
	*fwkdl.EndpointMetadata
	*fwkdl.Metrics
	snapshotAttributes
}

var _ fwksched.Endpoint = (*snapshotEndpoint)(nil)

func newSnapshotEndpoint(ep fwkdl.Endpoint) fwksched.Endpoint {
	snapshot, _ := newSnapshot([]fwkdl.Endpoint{ep}, defaultAttrRoom)
	return snapshot[0]
}

// defaultAttrRoom is the room each snapshot endpoint has for this request's values (what
// PrepareData plugins put and the live values a plugin has read) until a request shows what
// the configuration uses; past its room an endpoint's list moves to an allocation of its own.
const defaultAttrRoom = 4

// newSnapshot is the scheduling snapshot of candidates: their endpoints and room for room
// values each in two allocations, where one endpoint and one list each took two per candidate
// on every request. The endpoints share a lifetime anyway: a plugin that keeps one keeps the
// request's snapshot.
func newSnapshot(candidates []fwkdl.Endpoint, room int) ([]fwksched.Endpoint, []snapshotEndpoint) {
	snapshot := make([]fwksched.Endpoint, len(candidates))
	eps := make([]snapshotEndpoint, len(candidates))
	var attrs []snapshotAttr
	if room > 0 {
		attrs = make([]snapshotAttr, room*len(candidates))
	}
	for i, ep := range candidates {
		e := &eps[i]
		e.EndpointMetadata, e.Metrics, e.live = ep.GetMetadata(), ep.GetMetrics(), ep.GetAttributes()
		if room > 0 {
			e.own = attrs[room*i : room*i : room*(i+1)]
		}
		snapshot[i] = e
	}
	return snapshot, eps
}

// attrRoom is the room the next request's snapshot gives each endpoint: the most values one
// endpoint of this request held, so that a configuration whose plugins put two keys does not
// carry room for four on every candidate, and one that reads five gets them.
func attrRoom(eps []snapshotEndpoint) int {
	most := 0
	for i := range eps {
		eps[i].mu.Lock()
		most = max(most, len(eps[i].own))
		eps[i].mu.Unlock()
	}
	return most
}

// snapshotAttributes is a request's AttributeMap over one endpoint. GIE's Attributes is a
// sync.Map, and cloning one per endpoint per request, then storing each plugin's value in it,
// allocated a map root and an entry node per endpoint and key on every request (a tenth of the
// request path's allocations at 16 endpoints). A request writes a handful of keys, from one
// goroutine at a time (PrepareData, then the scheduler), so its own values are a short slice
// under a mutex (for a plugin that fans its work out to goroutines of its own).
//
// The endpoint's own attributes (data-layer extractors', such as engine metrics) are read from
// the live endpoint when a plugin first asks for a key, and that value is kept for the rest of
// the request: every plugin of one request sees the same value, the freshest there was at the
// first read. Copying the whole live map when the request began (GIE's Clone) cost six
// allocations per endpoint per request for values most configs never read.
type snapshotAttributes struct {
	live fwkdl.AttributeMap // the endpoint's own attributes; nil: none
	mu   sync.Mutex
	own  []snapshotAttr // this request's values, and the live values it has read
}

type snapshotAttr struct {
	key   string
	value fwkdl.Cloneable
}

var _ fwkdl.AttributeMap = (*snapshotAttributes)(nil)

// Put stores value under key for this request; a nil value is ignored, as GIE's map does.
func (a *snapshotAttributes) Put(key string, value fwkdl.Cloneable) {
	if value == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.setLocked(key, value)
}

func (a *snapshotAttributes) setLocked(key string, value fwkdl.Cloneable) {
	for i := range a.own {
		if a.own[i].key == key {
			a.own[i].value = value
			return
		}
	}
	if a.own == nil {
		a.own = make([]snapshotAttr, 0, defaultAttrRoom) // a clone's first write
	}
	a.own = append(a.own, snapshotAttr{key, value})
}

// Get returns a clone of the value under key, as GIE's map does: a caller may change what it
// got without changing what the next one reads. A value no caller can change is shared.
func (a *snapshotAttributes) Get(key string) (fwkdl.Cloneable, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, kv := range a.own {
		if kv.key == key {
			return cloneUnlessReadOnly(kv.value), true
		}
	}
	if a.live == nil {
		return nil, false
	}
	v, ok := a.live.Get(key) // a clone of the live value: this request's own from now on
	if !ok {
		return nil, false
	}
	a.setLocked(key, v)
	return cloneUnlessReadOnly(v), true
}

// cloneUnlessReadOnly clones v unless its type offers no way to change it. GIE's prefix match
// (unexported fields, getters only) is read on every endpoint of every request by the prefix
// scorer, so its clone was one allocation per candidate for a copy nobody could write.
func cloneUnlessReadOnly(v fwkdl.Cloneable) fwkdl.Cloneable {
	if _, ok := v.(*attrprefix.PrefixCacheMatchInfo); ok {
		return v
	}
	return v.Clone()
}

// Keys lists every key once: this request's, then the endpoint's it did not replace.
func (a *snapshotAttributes) Keys() []string {
	a.mu.Lock()
	keys := make([]string, 0, len(a.own))
	for _, kv := range a.own {
		keys = append(keys, kv.key)
	}
	a.mu.Unlock()
	if a.live == nil {
		return keys
	}
	for _, k := range a.live.Keys() {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	return keys
}

// Clone copies the map: the values are shared, as GIE's Clone shares them, and so is the live
// endpoint, whose keys the clone has not read yet.
func (a *snapshotAttributes) Clone() fwkdl.AttributeMap {
	a.mu.Lock()
	defer a.mu.Unlock()
	return &snapshotAttributes{live: a.live, own: slices.Clone(a.own)}
}

func (e *snapshotEndpoint) GetMetadata() *fwkdl.EndpointMetadata { return e.EndpointMetadata }
func (e *snapshotEndpoint) GetMetrics() *fwkdl.Metrics           { return e.Metrics }
func (e *snapshotEndpoint) Clone() fwkdl.AttributeMap            { return e.snapshotAttributes.Clone() }

// String prints the metadata and metrics (GIE's endpoint prints its three pointers).
func (e *snapshotEndpoint) String() string {
	if e == nil {
		return "<nil>"
	}
	return fmt.Sprintf("{EndpointMetadata:%+v Metrics:%+v}", e.EndpointMetadata, e.Metrics)
}
