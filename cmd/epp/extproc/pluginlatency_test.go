package extproc

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metrics"
)

type namedPlugin struct{ tn fwkplugin.TypedName }

func (p namedPlugin) TypedName() fwkplugin.TypedName { return p.tn }

// pluginDurationCount is the sample count of GIE's plugin latency series for the labels.
func pluginDurationCount(t *testing.T, point, typ, name string) uint64 {
	t.Helper()
	return pluginSeries(t, point, typ, name).GetSampleCount()
}

// pluginSeries is GIE's plugin latency series for the labels (empty when absent).
func pluginSeries(t *testing.T, point, typ, name string) *dto.Histogram {
	t.Helper()
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "inference_extension_plugin_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labels(m) == point+"/"+typ+"/"+name {
				return m.GetHistogram()
			}
		}
	}
	return &dto.Histogram{}
}

func labels(m *dto.Metric) string {
	v := map[string]string{}
	for _, l := range m.GetLabel() {
		v[l.GetName()] = l.GetValue()
	}
	return v["extension_point"] + "/" + v["plugin_type"] + "/" + v["plugin_name"]
}

// TestPluginLatencyRecordsIntoGIEsHistogram: the director finds GIE's own histogram (a GIE
// whose histogram changed name, help, labels or buckets fails here, not silently slower), and
// what it records is what GIE's RecordPluginProcessingLatency records, in the same series.
func TestPluginLatencyRecordsIntoGIEsHistogram(t *testing.T) {
	metrics.Register()
	vec := &histogramSource{lookup: pluginDurations}
	if vec.get() == nil {
		t.Fatal("GIE's plugin_duration_seconds histogram was not found in controller-runtime's registry")
	}
	p := namedPlugin{fwkplugin.TypedName{Type: "latency-test", Name: "one"}}
	l := newPluginLatency(vec, fwkrc.ResponseStreamingExtensionPoint, p)
	before := pluginDurationCount(t, fwkrc.ResponseStreamingExtensionPoint, "latency-test", "one")
	timeEach([]*pluginLatency{l, l, l}, func(int) {})
	metrics.RecordPluginProcessingLatency(fwkrc.ResponseStreamingExtensionPoint, "latency-test", "one", time.Millisecond)
	if got := pluginDurationCount(t, fwkrc.ResponseStreamingExtensionPoint, "latency-test", "one") - before; got != 4 {
		t.Fatalf("the series counted %d observations; want 4 (3 cached, 1 through GIE)", got)
	}
	if n := testing.AllocsPerRun(100, func() { timeEach([]*pluginLatency{l}, func(int) {}) }); n != 0 {
		t.Fatalf("%.0f allocations an observation", n)
	}
	ResetMetrics() // drops the vector's children; the cached one must not count on unseen
	l.observe(time.Millisecond)
	if got := pluginDurationCount(t, fwkrc.ResponseStreamingExtensionPoint, "latency-test", "one"); got != 1 {
		t.Fatalf("after ResetMetrics the series counted %d observations; want 1", got)
	}
}

// TestTimeEachChargesEachCallItsOwnTime: a slow call's time is its own, not the next one's.
func TestTimeEachChargesEachCallItsOwnTime(t *testing.T) {
	metrics.Register()
	vec := &histogramSource{lookup: pluginDurations}
	slow := newPluginLatency(vec, fwkrc.PreRequestExtensionPoint, namedPlugin{fwkplugin.TypedName{Type: "time-each", Name: "slow"}})
	fast := newPluginLatency(vec, fwkrc.PreRequestExtensionPoint, namedPlugin{fwkplugin.TypedName{Type: "time-each", Name: "fast"}})
	ran := 0
	timeEach([]*pluginLatency{slow, fast}, func(i int) {
		if ran++; i == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	})
	s := pluginSeries(t, fwkrc.PreRequestExtensionPoint, "time-each", "slow")
	f := pluginSeries(t, fwkrc.PreRequestExtensionPoint, "time-each", "fast")
	if ran != 2 || s.GetSampleCount() != 1 || f.GetSampleCount() != 1 || s.GetSampleSum() < 0.05 || f.GetSampleSum() >= s.GetSampleSum() {
		t.Fatalf("%d calls; slow %d samples, %.4f s; fast %d samples, %.4f s", ran, s.GetSampleCount(), s.GetSampleSum(), f.GetSampleCount(), f.GetSampleSum())
	}
}

// TestPluginLatencyWithoutGIEsMetrics: the histogram is looked up once, at the first
// observation, and with nothing found the director records through GIE's function, which
// needs no registry.
func TestPluginLatencyWithoutGIEsMetrics(t *testing.T) {
	looked := 0
	src := &histogramSource{lookup: func() *prometheus.HistogramVec { looked++; return nil }}
	l := newPluginLatency(src, fwkrc.PreRequestExtensionPoint, namedPlugin{fwkplugin.TypedName{Type: "t", Name: "n"}})
	if looked != 0 {
		t.Fatal("the histogram was looked up before the first observation (the EPP registers GIE's metrics after building its director)")
	}
	l.observe(time.Millisecond)
	l.observe(time.Millisecond)
	if looked != 1 {
		t.Fatalf("looked up %d times; want once", looked)
	}
}

// BenchmarkPluginLatency: one observation through GIE's RecordPluginProcessingLatency (the
// baseline) and through the director's cached child, in the same run.
func BenchmarkPluginLatency(b *testing.B) {
	metrics.Register()
	vec := &histogramSource{lookup: pluginDurations}
	if vec.get() == nil {
		b.Fatal("GIE's histogram not found")
	}
	l := newPluginLatency(vec, fwkrc.ResponseStreamingExtensionPoint, namedPlugin{fwkplugin.TypedName{Type: "bench-type", Name: "bench-name"}})
	var gie, cached float64
	b.Run("gie", func(b *testing.B) {
		start := time.Now()
		for b.Loop() {
			metrics.RecordPluginProcessingLatency(fwkrc.ResponseStreamingExtensionPoint, "bench-type", "bench-name", time.Microsecond)
		}
		gie = float64(time.Since(start).Nanoseconds()) / float64(b.N)
	})
	b.Run("cached", func(b *testing.B) {
		start := time.Now()
		for b.Loop() {
			l.observe(time.Microsecond)
		}
		cached = float64(time.Since(start).Nanoseconds()) / float64(b.N)
	})
	if cached > 0 {
		b.Logf("an observation: GIE's function %.0f ns, the cached child %.0f ns: %.1fx less", gie, cached, gie/cached)
	}
}
