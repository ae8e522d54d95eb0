package kvevents

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Metrics are the KV-event pipeline's collectors. One set exists per EPP registry (NewMetrics);
// the series carry no per-endpoint label, so their number does not grow with the pool.
type Metrics struct {
	Messages      *prometheus.CounterVec
	Events        *prometheus.CounterVec
	StoresSkipped *prometheus.CounterVec
	Gaps          prometheus.Counter
	Resyncs       *prometheus.CounterVec
	Lag           prometheus.Histogram
	IndexBlocks   prometheus.Gauge
	IndexKeys     prometheus.Gauge
	Evictions     prometheus.Counter
	Subscribers   *prometheus.GaugeVec
	Reconnects    prometheus.Counter
	Lookups       prometheus.Counter
}

// Message results (label values of pdgate_kv_events_messages_total).
const (
	ResultApplied   = "applied"
	ResultDuplicate = "duplicate"
	ResultMalformed = "malformed"
	// ResultOverLimit: a new source beyond MaxSources.
	ResultOverLimit = "over_limit"
	// ResultUnmatched and ResultAmbiguous: central-mode topics naming no pool endpoint, or an
	// address several endpoints share (Resolution).
	ResultUnmatched = "unmatched_source"
	ResultAmbiguous = "ambiguous_source"
)

// Resync reasons (label values of pdgate_kv_events_resyncs_total): why an endpoint's blocks
// were dropped until its stream proves itself again.
const (
	ResyncGap        = "gap"
	ResyncReset      = "sequence_reset"
	ResyncDisconnect = "disconnect"
	ResyncRemoved    = "endpoint_removed"
	// ResyncRestart: the stream shows a new publisher process (a sequence number repeated
	// with another payload, or the batch ts going back).
	ResyncRestart = "publisher_restart"
	// ResyncEngineRestart: the engine's scraped metrics show a new process start time.
	ResyncEngineRestart = "engine_restart"
	// ResyncUnreachable: the engine's metrics have not been scraped for longer than the
	// staleness bound (the process is down or restarting).
	ResyncUnreachable = "engine_unreachable"
)

// NewMetrics returns the pipeline's collectors registered on reg (the registerer the EPP puts
// on the plugin handle: pluginkit.Registerer). Collectors another plugin instance registered
// first are reused, so every precise-prefix plugin of one EPP shares one set.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := newMetrics()
	return m, errors.Join(pluginkit.RegisterInto(reg, &m.Messages), pluginkit.RegisterInto(reg, &m.Events),
		pluginkit.RegisterInto(reg, &m.StoresSkipped), pluginkit.RegisterInto(reg, &m.Gaps),
		pluginkit.RegisterInto(reg, &m.Resyncs), pluginkit.RegisterInto(reg, &m.Lag),
		pluginkit.RegisterInto(reg, &m.IndexBlocks), pluginkit.RegisterInto(reg, &m.IndexKeys),
		pluginkit.RegisterInto(reg, &m.Evictions), pluginkit.RegisterInto(reg, &m.Subscribers),
		pluginkit.RegisterInto(reg, &m.Reconnects), pluginkit.RegisterInto(reg, &m.Lookups))
}

func newMetrics() *Metrics {
	return &Metrics{
		Messages: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_kv_events_messages_total",
			Help: "KV-event messages received from engines, by result (applied, duplicate, malformed, over_limit, unmatched_source, ambiguous_source)."}, []string{"result"}),
		Events: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_kv_events_events_total",
			Help: "KV-cache events applied to the index, by type (BlockStored, BlockRemoved, AllBlocksCleared)."}, []string{"type"}),
		StoresSkipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_kv_events_stores_skipped_total",
			Help: "BlockStored events (or their blocks) not indexed, by reason (block_size, not_dense, unknown_parent, group_kind, unknown_block)."}, []string{"reason"}),
		Gaps: prometheus.NewCounter(prometheus.CounterOpts{Name: "pdgate_kv_events_sequence_gaps_total",
			Help: "Sequence-number gaps detected in engines' event streams (messages lost)."}),
		Resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pdgate_kv_events_resyncs_total",
			Help: "Times an endpoint's indexed blocks were dropped because its stream could no longer be trusted, by reason (gap, sequence_reset, publisher_restart, engine_restart, engine_unreachable, disconnect, endpoint_removed)."}, []string{"reason"}),
		Lag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pdgate_kv_events_lag_seconds",
			Help:    "Time from an engine publishing a batch (its ts) to the EPP applying it.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5}}),
		IndexBlocks: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pdgate_kv_events_index_blocks",
			Help: "Engine blocks held by the KV-event index, all endpoints together."}),
		IndexKeys: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pdgate_kv_events_index_keys",
			Help: "Distinct request keys held by the KV-event index."}),
		Evictions: prometheus.NewCounter(prometheus.CounterOpts{Name: "pdgate_kv_events_index_evictions_total",
			Help: "Blocks evicted from the KV-event index to stay within its bounds."}),
		Subscribers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pdgate_kv_events_subscribers",
			Help: "KV-event subscriber sockets, by state (connected, connecting)."}, []string{"state"}),
		Reconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "pdgate_kv_events_subscriber_reconnects_total",
			Help: "Times a KV-event subscriber socket was rebuilt after an error."}),
		Lookups: prometheus.NewCounter(prometheus.CounterOpts{Name: "pdgate_kv_events_lookups_total",
			Help: "Prefix lookups served by the KV-event index (one per request)."}),
	}
}
