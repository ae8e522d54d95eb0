package bucketplanner

import (
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Metrics are the planner's Prometheus series.
type Metrics struct {
	bandTotal   *prometheus.CounterVec
	tokensTotal *prometheus.CounterVec
	bandMax     *prometheus.GaugeVec

	mu    sync.Mutex
	known map[string]bool
}

// NewMetrics creates the series and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		bandTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_bucket_serve_band_total",
			Help: "Requests narrowed to a roleset by an adaptive bucket-serving band."}, []string{"roleset"}),
		tokensTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_bucket_serve_prompt_tokens_total",
			Help: "Prompt tokens of requests narrowed to a roleset by a bucket-serving band."}, []string{"roleset"}),
		bandMax: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdgate_bucket_serve_band_max",
			Help: "Highest band upper bound (prompt tokens) planned for a roleset."}, []string{"roleset"}),
		known: map[string]bool{},
	}
	if reg != nil {
		// A conflicting foreign collector leaves the series unregistered; planning goes on.
		m.bandTotal, _ = pluginkit.Register(reg, m.bandTotal)
		m.tokensTotal, _ = pluginkit.Register(reg, m.tokensTotal)
		m.bandMax, _ = pluginkit.Register(reg, m.bandMax)
	}
	return m
}

func (m *Metrics) banded(roleset string, tokens int) {
	m.bandTotal.WithLabelValues(roleset).Inc()
	m.tokensTotal.WithLabelValues(roleset).Add(float64(max(tokens, 0)))
}

func (m *Metrics) setBandMax(maxes map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for rs := range m.known {
		if _, ok := maxes[rs]; !ok {
			m.bandMax.DeleteLabelValues(rs)
			delete(m.known, rs)
		}
	}
	for rs, v := range maxes {
		m.bandMax.WithLabelValues(rs).Set(float64(v))
		m.known[rs] = true
	}
}

// String is for debugging.
func (b Band) String() string {
	return b.Roleset + "[" + strconv.Itoa(b.Min) + "," + strconv.Itoa(b.Max) + "]"
}
