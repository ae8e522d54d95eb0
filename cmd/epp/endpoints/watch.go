package endpoints

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	endpointsGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "pdgate_epp_standalone_endpoints",
		Help: "Endpoints currently loaded from the standalone endpoints file.",
	})
	reloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_epp_endpoints_file_reloads_total",
		Help: "Endpoints file loads by result (applied, rejected).",
	}, []string{"result"})
)

func init() { crmetrics.Registry.MustRegister(endpointsGauge, reloads) }

// Loader reads the endpoints file into a Store and keeps it in step with the file.
type Loader struct {
	Path  string
	Store *Store
	// Interval between checks of the file; polling survives editors' rename-on-save and
	// Kubernetes ConfigMap symlink swaps, which inotify watches on the file itself miss.
	Interval time.Duration

	last []byte
}

// Load reads and applies the file once. A malformed file is rejected with an error and the
// store keeps its previous endpoints.
func (l *Loader) Load(ctx context.Context) error {
	data, err := os.ReadFile(l.Path)
	if err != nil {
		reloads.WithLabelValues("rejected").Inc()
		return fmt.Errorf("reading endpoints file %s: %w", l.Path, err)
	}
	if l.last != nil && bytes.Equal(data, l.last) {
		return nil
	}
	list, err := Parse(data)
	if err != nil {
		reloads.WithLabelValues("rejected").Inc()
		l.last = data // do not log the same broken content every tick
		return fmt.Errorf("%s: %w", l.Path, err)
	}
	l.last = data
	c := l.Store.Apply(list)
	reloads.WithLabelValues("applied").Inc()
	endpointsGauge.Set(float64(l.Store.Len()))
	log.FromContext(ctx).Info("Endpoints file applied", "path", l.Path, "endpoints", l.Store.Len(),
		"added", c.Added, "removed", c.Removed, "updated", c.Updated)
	return nil
}

// Watch re-applies the file whenever its content changes, until ctx ends.
func (l *Loader) Watch(ctx context.Context) {
	interval := l.Interval
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	logger := log.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := l.Load(ctx); err != nil {
				logger.Error(err, "Endpoints file rejected; the previous endpoints stay in service")
			}
		}
	}
}
