package pdtokenledger

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// Metrics are the ledger's Prometheus series.
type Metrics struct {
	active, kv, decode *prometheus.GaugeVec
	decodeSlots        *prometheus.GaugeVec
	encodeRequests     *prometheus.GaugeVec
	forceReleased      *prometheus.CounterVec
	sessions           prometheus.Gauge
	sessionsFull       prometheus.Counter
	sharedSyncs        *prometheus.CounterVec
	remoteReplicas     prometheus.Gauge
	sharedDegraded     prometheus.Gauge
	sharedFallbacks    prometheus.Counter

	// aibrix holds AIBrix's names of the three per-pod gauges (active, kv, decode) once
	// EnableAIBrixNames ran; nil otherwise. Atomic: the process-wide Metrics is shared by
	// every ledger, and a config reload may enable the names while another ledger charges.
	aibrixOnce sync.Once
	aibrix     atomic.Pointer[[3]*prometheus.GaugeVec]
}

// AIBrixGaugeNames are AIBrix's ledger gauge names, same labels as pdgate's. The decode one is
// inferred (AIBrix's constant PDTokenLoadDecodeTokens; its exported name is not documented).
var AIBrixGaugeNames = [3]string{"pd_token_load_active_tokens", "pd_token_load_kv_tokens", "pd_token_load_decode_tokens"}

// EnableAIBrixNames also emits the per-pod gauges under AIBrix's names on reg (idempotent;
// already registered collectors are reused).
func (m *Metrics) EnableAIBrixNames(reg prometheus.Registerer) {
	m.aibrixOnce.Do(func() {
		var g [3]*prometheus.GaugeVec
		for i, name := range AIBrixGaugeNames {
			g[i] = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name,
				Help: "AIBrix-compatible name of the matching pdgate_token_load_* gauge."}, podLabels)
			if reg != nil {
				g[i], _ = pluginkit.Register(reg, g[i]) // a foreign collector: AIBrix's names stay unexported
			}
		}
		m.aibrix.Store(&g)
	})
}

// both sets two gauges at once: pdgate's name and AIBrix's.
type both [2]gaugeSetter

func (b both) Set(v float64) { b[0].Set(v); b[1].Set(v) }

type gaugeSetter interface{ Set(float64) }

var podLabels = []string{"namespace", "pod_name"}

// NewMetrics creates the ledger metrics and registers them with reg (nil: not registered).
// Collectors already registered with reg are reused.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdgate_token_load_active_tokens",
			Help: "Prefill tokens being computed on the pod (token-load ledger)."}, podLabels),
		kv: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdgate_token_load_kv_tokens",
			Help: "Prefill tokens whose KV stays resident on the pod until their requests complete."}, podLabels),
		decode: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdgate_token_load_decode_tokens",
			Help: "Prompt tokens charged to the decode pod by this EPP replica, without growth."}, podLabels),
		decodeSlots: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdgate_token_load_decode_slots",
			Help: "Open decode charges (sequences in the decode batch) this EPP replica holds on the pod, released at end of stream."}, podLabels),
		encodeRequests: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdgate_token_load_encode_requests",
			Help: "Requests this EPP replica sent to the encoder pod whose prefill leg has not yet returned."}, podLabels),
		forceReleased: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_token_load_force_released_total",
			Help: "Ledger charges force-released: part=prefill|decode, reason=ttl|unconfirmed (janitor) or reconciled (more leases than the pod's scraped requests)."}, []string{"part", "reason"}),
		sessions: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pdgate_token_load_sessions",
			Help: "Sessions in the token-load session table."}),
		sessionsFull: prometheus.NewCounter(prometheus.CounterOpts{Name: "pdgate_token_load_session_table_full_total",
			Help: "New sessions not recorded because the session table was full."}),
		sharedSyncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_token_load_shared_syncs_total",
			Help: "Round trips to Redis for the shared decode ledger by result (ok, error)."}, []string{"result"}),
		remoteReplicas: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pdgate_token_load_shared_remote_replicas",
			Help: "Other live EPP replicas seen in the shared decode ledger at the last sync."}),
		sharedDegraded: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pdgate_token_load_shared_degraded",
			Help: "1 while the shared decode ledger is unreachable and this replica scores with its local ledger only; 0 otherwise (and without sharing)."}),
		sharedFallbacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "pdgate_token_load_shared_fallbacks_total",
			Help: "Times this replica fell back from the shared decode ledger to its local ledger (Redis became unreachable)."}),
	}
	if reg == nil {
		return m, nil
	}
	return m, errors.Join(pluginkit.RegisterInto(reg, &m.active), pluginkit.RegisterInto(reg, &m.kv),
		pluginkit.RegisterInto(reg, &m.decode), pluginkit.RegisterInto(reg, &m.decodeSlots), pluginkit.RegisterInto(reg, &m.encodeRequests),
		pluginkit.RegisterInto(reg, &m.forceReleased),
		pluginkit.RegisterInto(reg, &m.sessions), pluginkit.RegisterInto(reg, &m.sessionsFull),
		pluginkit.RegisterInto(reg, &m.sharedSyncs), pluginkit.RegisterInto(reg, &m.remoteReplicas),
		pluginkit.RegisterInto(reg, &m.sharedDegraded), pluginkit.RegisterInto(reg, &m.sharedFallbacks))
}

func splitPod(k tokenload.PodKey) (ns, name string) {
	s := string(k)
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return s[:i], s[i+1:]
		}
	}
	return "", s
}

func (m *Metrics) podGauges(k tokenload.PodKey) (a, kv, d gaugeSetter) {
	ns, name := splitPod(k)
	a, kv, d = m.active.WithLabelValues(ns, name), m.kv.WithLabelValues(ns, name), m.decode.WithLabelValues(ns, name)
	if g := m.aibrix.Load(); g != nil {
		a, kv, d = both{a, g[0].WithLabelValues(ns, name)}, both{kv, g[1].WithLabelValues(ns, name)}, both{d, g[2].WithLabelValues(ns, name)}
	}
	return a, kv, d
}

func (m *Metrics) deletePod(k tokenload.PodKey) {
	ns, name := splitPod(k)
	m.active.DeleteLabelValues(ns, name)
	m.kv.DeleteLabelValues(ns, name)
	m.decode.DeleteLabelValues(ns, name)
	m.decodeSlots.DeleteLabelValues(ns, name)
	m.encodeRequests.DeleteLabelValues(ns, name)
	if g := m.aibrix.Load(); g != nil {
		for _, v := range g {
			v.DeleteLabelValues(ns, name)
		}
	}
}
