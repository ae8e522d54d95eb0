package forecastadmitter

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Request classes and the decisions that are not refusals (a refusal's decision is its llm-d
// drop reason).
const (
	classCritical            = "critical"
	classSheddable           = "sheddable"
	decisionAdmitted         = "admitted"
	decisionAdmittedCritical = "admitted_critical"
	decisionPickMissed       = "rejected-saturated-pick"
)

type metrics struct {
	decisions  *prometheus.CounterVec
	ttft, tpot prometheus.Histogram
}

func newMetrics() *metrics {
	return &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdgate_forecast_admission_decisions_total",
			Help: "Requests forecast-admitter decided, by class (critical: priority >= 0, sheddable: < 0) and decision (admitted; admitted_critical: a critical request, admitted without a forecast unless shedCritical; rejected-saturated-pick: refused once the scheduler's pick missed the objective; else llm-d's drop reason).",
		}, []string{"class", "decision"}),
		ttft: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pdgate_forecast_admission_ttft_seconds",
			Help:    "The best placement's forecast TTFT (time queued in flow control + prefill wait + prefill + KV transfer + first decode step) of each request forecast-admitter decided.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
		tpot: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pdgate_forecast_admission_tpot_seconds",
			Help:    "The best placement's forecast TPOT (decode step with the request batched) of each request forecast-admitter decided.",
			Buckets: prometheus.ExponentialBuckets(0.005, 1.5, 12),
		}),
	}
}

// registerMetrics registers *m's collectors on reg, keeping the ones already registered (two
// instances share one series set).
func registerMetrics(reg prometheus.Registerer, m **metrics) error {
	c := *m
	return errors.Join(pluginkit.RegisterInto(reg, &c.decisions), pluginkit.RegisterInto(reg, &c.ttft),
		pluginkit.RegisterInto(reg, &c.tpot))
}

func (m *metrics) decided(class, decision string) { m.decisions.WithLabelValues(class, decision).Inc() }

func (m *metrics) observe(f Forecast) {
	if f.Room == 0 {
		return
	}
	m.ttft.Observe(f.TTFT.Seconds())
	m.tpot.Observe(f.TPOT.Seconds())
}
