package pdratioadvisor

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// metrics are the advisor's gauges; Factory swaps in the registered (possibly shared) ones.
type metrics struct {
	desired *prometheus.GaugeVec
	reason  *prometheus.GaugeVec
}

func newMetrics() *metrics {
	return &metrics{
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdgate_advisor_desired_replicas",
			Help: "Replicas pd-ratio-advisor would run for the role under the configured SLO (after hysteresis)."},
			[]string{"pool", "role"}),
		reason: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdgate_advisor_reason",
			Help: "1 for the reason behind the role's advice (prefill_bound, decode_bound, overprovisioned, steady, no_data), 0 for the others."},
			[]string{"pool", "role", "reason"}),
	}
}

func (m *metrics) register(reg prometheus.Registerer) error {
	return errors.Join(pluginkit.RegisterInto(reg, &m.desired), pluginkit.RegisterInto(reg, &m.reason))
}

// publish writes the advice: every reason of a role is written, the current one as 1.
func (m *metrics) publish(pool string, advice []contract.ReplicaAdvice) {
	for _, a := range advice {
		m.desired.WithLabelValues(pool, a.Role).Set(float64(a.Replicas))
		for _, r := range Reasons {
			v := 0.0
			if r == a.Reason {
				v = 1
			}
			m.reason.WithLabelValues(pool, a.Role, r).Set(v)
		}
	}
}
