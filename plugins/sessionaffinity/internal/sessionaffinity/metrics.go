package sessionaffinity

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Miss and rebind reasons (metric label values).
const (
	ReasonUnbound    = "unbound"    // session_id: no live binding for the session
	ReasonAbsent     = "absent"     // the session's endpoint is not among the candidates
	ReasonOverloaded = "overloaded" // the session's endpoint is over the load allowance
	ReasonInvalid    = "invalid"    // encoded_endpoint_header: the header does not decode
)

// Metrics are the pdgate_session_affinity_* series, labelled by plugin (GIE's TypedName: "<name>/<type>").
type Metrics struct {
	hits      *prometheus.CounterVec
	misses    *prometheus.CounterVec
	rebinds   *prometheus.CounterVec
	bindings  *prometheus.GaugeVec
	refused   *prometheus.CounterVec
	evictions *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not registered). Collectors
// already registered with reg are reused, so several instances share one series set.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_session_affinity_hits_total",
			Help: "Scored or filtered requests whose session endpoint was a candidate and got the affinity."}, []string{"plugin"}),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_session_affinity_misses_total",
			Help: "Requests carrying a session that got no affinity, by reason (unbound, absent, overloaded, invalid)."}, []string{"plugin", "reason"}),
		rebinds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_session_affinity_rebinds_total",
			Help: "Sessions moved to another endpoint, by reason (absent, overloaded)."}, []string{"plugin", "reason"}),
		bindings: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdgate_session_affinity_bindings",
			Help: "Session bindings held in the session_id table."}, []string{"plugin"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_session_affinity_bindings_refused_total",
			Help: "New sessions not bound because the session_id table was full (sessionIdConfig.maxSessions)."}, []string{"plugin"}),
		evictions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_session_affinity_evictions_total",
			Help: "Session bindings deleted by the sweeper after evictionTtlSeconds idle."}, []string{"plugin"}),
	}
	if reg == nil {
		return m, nil
	}
	if err := errors.Join(pluginkit.RegisterInto(reg, &m.hits), pluginkit.RegisterInto(reg, &m.misses),
		pluginkit.RegisterInto(reg, &m.rebinds), pluginkit.RegisterInto(reg, &m.bindings),
		pluginkit.RegisterInto(reg, &m.refused), pluginkit.RegisterInto(reg, &m.evictions)); err != nil {
		return nil, err
	}
	return m, nil
}
