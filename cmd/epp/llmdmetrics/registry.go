package llmdmetrics

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Registry registers with inner and gathers inner's families plus their llm-d twins.
type Registry struct {
	prometheus.Registerer
	inner prometheus.Gatherer
}

// Wrap returns a registry over inner that adds, at each gather, a copy of every family that has
// llm-d names (Names) under each of them, unless inner already has a family of that name.
func Wrap(inner crmetrics.RegistererGatherer) *Registry {
	return &Registry{Registerer: inner, inner: inner}
}

// Gather implements prometheus.Gatherer.
func (r *Registry) Gather() ([]*dto.MetricFamily, error) {
	mfs, err := r.inner.Gather()
	have := make(map[string]bool, len(mfs))
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	out := mfs
	for _, mf := range mfs {
		for _, name := range Names(mf.GetName()) {
			if have[name] {
				continue
			}
			twin := proto.Clone(mf).(*dto.MetricFamily)
			twin.Name = proto.String(name)
			out = append(out, twin)
			have[name] = true
		}
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, err
}

var install sync.Once

// Install makes controller-runtime's registry, which both of the EPP's metrics servers serve,
// a Registry over itself. Families registered before or after are served either way, since
// registration still goes to the same registry. Call it before the metrics server starts;
// later calls do nothing.
func Install() {
	install.Do(func() { crmetrics.Registry = Wrap(crmetrics.Registry) })
}
