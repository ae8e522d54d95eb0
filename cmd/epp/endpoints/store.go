package endpoints

import (
	"context"
	"maps"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

	"github.com/pdgate/pdgate/cmd/epp/podmeta"
)

// Store is a GIE datastore whose endpoints come from the endpoints file rather than from Pod
// events. It embeds a GIE datastore for the pool, objectives and model rewrites; endpoints are
// its own so that each keeps the exact name, port and metrics port of the file (GIE's datastore
// derives "<pod>-rank-<i>" names and one port list for the whole pool).
type Store struct {
	datastore.Datastore
	ctx     context.Context
	factory datalayer.EndpointFactory

	mu  sync.RWMutex
	eps map[types.NamespacedName]*entry
}

type entry struct {
	spec Endpoint
	ep   fwkdl.Endpoint
}

// NewStore returns an empty store. The factory (GIE's data-layer runtime) starts one metrics
// collector per endpoint; ctx bounds the collectors' lives.
func NewStore(ctx context.Context, factory datalayer.EndpointFactory, pool *datalayer.EndpointPool) *Store {
	return &Store{
		Datastore: datastore.NewDatastore(ctx, factory, 0).WithEndpointPool(pool),
		ctx:       ctx,
		factory:   factory,
		eps:       map[types.NamespacedName]*entry{},
	}
}

// Change counts what Apply did.
type Change struct{ Added, Removed, Updated, Unchanged int }

// Apply makes the store hold exactly the given endpoints. Endpoints whose address or ports
// changed get a fresh collector; label or annotation changes update the metadata in place.
func (s *Store) Apply(list []Endpoint) Change {
	var c Change
	want := make(map[types.NamespacedName]Endpoint, len(list))
	for _, ep := range list {
		want[types.NamespacedName{Namespace: ep.Namespace, Name: ep.Name}] = ep
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for nn, e := range s.eps {
		spec, ok := want[nn]
		if ok && spec.Address == e.spec.Address && spec.Port == e.spec.Port && spec.MetricsPort == e.spec.MetricsPort {
			continue
		}
		delete(s.eps, nn)
		s.factory.ReleaseEndpoint(e.ep)
		if !ok {
			c.Removed++
		}
	}
	for nn, spec := range want {
		meta := metadata(nn, spec)
		if e, ok := s.eps[nn]; ok {
			if maps.Equal(e.spec.Labels, spec.Labels) && maps.Equal(e.spec.Annotations, spec.Annotations) {
				c.Unchanged++
				continue
			}
			e.ep.UpdateMetadata(meta)
			e.spec = spec
			c.Updated++
			continue
		}
		ep := s.factory.NewEndpoint(s.ctx, meta, s)
		if ep == nil {
			log.FromContext(s.ctx).Error(nil, "Data layer refused the endpoint (collector already running)", "endpoint", nn)
			continue
		}
		ep.UpdateMetadata(meta)
		s.eps[nn] = &entry{spec: spec, ep: ep}
		c.Added++
	}
	return c
}

func metadata(nn types.NamespacedName, spec Endpoint) *fwkdl.EndpointMetadata {
	return &fwkdl.EndpointMetadata{
		NamespacedName: nn,
		PodName:        spec.Name,
		Address:        spec.Address,
		Port:           strconv.Itoa(spec.Port),
		MetricsHost:    spec.MetricsHostPort(),
		Labels:         podmeta.MirrorAnnotations(spec.Labels, spec.Annotations),
	}
}

// PodList lists the file's endpoints matching predicate.
func (s *Store) PodList(predicate func(fwkdl.Endpoint) bool) []fwkdl.Endpoint {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]fwkdl.Endpoint, 0, len(s.eps))
	for _, e := range s.eps {
		if predicate == nil || predicate(e.ep) {
			out = append(out, e.ep)
		}
	}
	return out
}

// PodUpdateOrAddIfNotExist ignores Pod objects: in standalone mode the file is the only
// source of endpoints. It reports true ("already present") so callers do not count an add.
func (s *Store) PodUpdateOrAddIfNotExist(context.Context, *corev1.Pod) bool { return true }

// PodDelete removes the endpoints of a pod name (used only by callers that know file names).
func (s *Store) PodDelete(podName string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for nn, e := range s.eps {
		if e.spec.Name == podName {
			delete(s.eps, nn)
			s.factory.ReleaseEndpoint(e.ep)
		}
	}
}

// Clear releases every endpoint and clears the embedded datastore.
func (s *Store) Clear() {
	s.mu.Lock()
	for nn, e := range s.eps {
		delete(s.eps, nn)
		s.factory.ReleaseEndpoint(e.ep)
	}
	s.mu.Unlock()
	s.Datastore.Clear()
}

// Len returns the number of endpoints.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.eps)
}
