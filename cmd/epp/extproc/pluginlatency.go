package extproc

import (
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metrics"
)

// pluginLatency records one plugin's time at one extension point in GIE's
// inference_extension_plugin_duration_seconds histogram, as GIE's
// metrics.RecordPluginProcessingLatency does, through the histogram's child for the plugin,
// looked up on first use. GIE's function looks the child up on every call (hashing and
// validating three label values under the vector's lock): ~1,450 instructions, paid by every
// ResponseBody plugin on every chunk of a streamed answer, where it was 7 % of the
// recommended config's EPP CPU at 128 streamed tokens, for plugins that themselves took 0.2 %.
//
// The histogram is GIE's own vector (unexported), found in controller-runtime's registry: a
// vector of the same name, help, labels and buckets cannot register beside it, and the
// registry's AlreadyRegisteredError carries the existing collector (client_golang's way to
// share one). Where it is not there (GIE's metrics not registered, or a GIE whose histogram
// differs), every observation goes through RecordPluginProcessingLatency as before.
//
// GIE's metrics.Reset, which tests call between exchanges, drops the vector's children: a child
// cached before it would count into a series no longer exported. Tests reset through
// ResetMetrics instead, which also makes every cached child be looked up again.
type pluginLatency struct {
	point, pluginType, name string
	source                  *histogramSource
	child                   atomic.Pointer[cachedObserver]
}

// histogramSource finds GIE's histogram once, at the first observation: the EPP builds its
// director before it registers GIE's metrics, and requests come after both.
type histogramSource struct {
	lookup func() *prometheus.HistogramVec
	once   sync.Once
	vec    *prometheus.HistogramVec
}

func (s *histogramSource) get() *prometheus.HistogramVec {
	s.once.Do(func() { s.vec = s.lookup() })
	return s.vec
}

type cachedObserver struct {
	prometheus.Observer
	generation uint64
}

// metricsGeneration counts ResetMetrics calls.
var metricsGeneration atomic.Uint64

// ResetMetrics resets GIE's metrics (metrics.Reset) for a test that reads each exchange's
// metrics on its own.
func ResetMetrics() {
	metrics.Reset()
	metricsGeneration.Add(1)
}

func newPluginLatency(source *histogramSource, point string, p fwkplugin.Plugin) *pluginLatency {
	tn := p.TypedName()
	return &pluginLatency{point: point, pluginType: tn.Type, name: tn.Name, source: source}
}

// timeEach makes calls 0..len(latency)-1 in order and records each call's time in its
// latency: one clock read after each call, where timing each call on its own takes a wall and
// monotonic read before it and another after (GIE's hooks' way): a streamed answer makes these
// calls once per token.
func timeEach(latency []*pluginLatency, call func(i int)) {
	start := time.Now()
	var prev time.Duration
	for i, l := range latency {
		call(i)
		at := time.Since(start)
		l.observe(at - prev)
		prev = at
	}
}

// observe records one call's time d.
func (l *pluginLatency) observe(d time.Duration) {
	vec := l.source.get()
	if vec == nil {
		metrics.RecordPluginProcessingLatency(l.point, l.pluginType, l.name, d)
		return
	}
	o, gen := l.child.Load(), metricsGeneration.Load()
	if o == nil || o.generation != gen {
		o = &cachedObserver{Observer: vec.WithLabelValues(l.point, l.pluginType, l.name), generation: gen}
		l.child.Store(o)
	}
	o.Observe(d.Seconds())
}

// pluginDurations returns GIE's plugin latency histogram from controller-runtime's registry,
// or nil when it is not registered there.
func pluginDurations() *prometheus.HistogramVec {
	probe := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Subsystem: "inference_extension",
		Name:      "plugin_duration_seconds",
		Help:      "[ALPHA] Plugin processing latency distribution in seconds for each extension point, plugin type and plugin name.",
		Buckets:   []float64{0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1},
	}, []string{"extension_point", "plugin_type", "plugin_name"})
	err := crmetrics.Registry.Register(probe)
	if err == nil {
		// GIE's metrics are not registered (bench sim, tests): give the name back at once. The
		// EPP registers them at start-up, before the first request is observed.
		crmetrics.Registry.Unregister(probe)
		return nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if vec, ok := are.ExistingCollector.(*prometheus.HistogramVec); ok {
			return vec
		}
	}
	return nil
}
