package proxy

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdgate/pdgate/cmd/internal/telemetry"
)

// Metrics are the sidecar's Prometheus series (documented in cmd/sidecar/README.md).
type Metrics struct {
	Requests            *prometheus.CounterVec
	Legs                *prometheus.CounterVec
	PrefillSeconds      *prometheus.HistogramVec
	KVHandoffSeconds    *prometheus.HistogramVec
	Watchdog            *prometheus.CounterVec
	Aborts              *prometheus.CounterVec
	AllowlistRejections *prometheus.CounterVec
	PrefillRetries      *prometheus.CounterVec
	InFlight            prometheus.Gauge
	// PhaseSeconds is pdgate_request_phase_seconds{phase}: the sidecar's phases of each
	// request (timeline.go).
	PhaseSeconds *prometheus.HistogramVec
	// PrefillDiverted counts every request whose prefill did not run where the EPP said: the
	// one series an operator alerts on to see a broken prefill tier within one scrape.
	PrefillDiverted *prometheus.CounterVec
	// KnobRejections counts x-pdgate-sidecar-knobs values with an invalid item.
	KnobRejections prometheus.Counter
	// DecoderPortRejections counts x-pdgate-decoder-port values that are not a port in
	// 1..65535 (the --engine-url port applied).
	DecoderPortRejections prometheus.Counter
	// PrefillReleases counts prefill-release callbacks to the EPP by result.
	PrefillReleases *prometheus.CounterVec
	// AIBrixFailures is AIBrix's gateway_request_model_fail_total{status, status_code}, nil
	// unless the AIBrix-compatible names were asked for (WithAIBrixNames).
	AIBrixFailures *prometheus.CounterVec
}

var latencyBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// NewMetrics creates and registers the series on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdgate_sidecar_requests_total",
			Help: "Inference requests handled, by engine, mode (decode-only, pd, epd) and response status code.",
		}, []string{"engine", "mode", "code"}),
		Legs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdgate_sidecar_legs_total",
			Help: "Legs sent, by leg (encode, prefill, decode), engine and outcome.",
		}, []string{"leg", "engine", "outcome"}),
		PrefillSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pdgate_sidecar_prefill_duration_seconds", Help: "Prefill leg duration (all attempts), by engine and outcome.",
			Buckets: latencyBuckets,
		}, []string{"engine", "outcome"}),
		KVHandoffSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "pdgate_sidecar_kv_handoff_seconds", Help: "Time from the prefill response to the first decode body byte, by engine.",
			Buckets: latencyBuckets,
		}, []string{"engine"}),
		Watchdog: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdgate_sidecar_decode_watchdog_total",
			Help: "Decode watchdog firings, by phase (first_response, response, stream_idle) and whether headers were already sent.",
		}, []string{"phase", "headers_sent"}),
		Aborts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdgate_sidecar_decode_aborts_total",
			Help: "SGLang /abort_request attempts, by trigger and result.",
		}, []string{"trigger", "result"}),
		AllowlistRejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdgate_sidecar_allowlist_rejections_total",
			Help: "Targets refused by the allow-list, by stage (prefill, encode).",
		}, []string{"stage"}),
		PrefillRetries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdgate_sidecar_prefill_retries_total", Help: "Prefill attempts beyond the first, by engine.",
		}, []string{"engine"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "pdgate_sidecar_inflight_requests", Help: "Inference requests in flight.",
		}),
		PrefillDiverted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdgate_sidecar_prefill_diverted_total",
			Help: "Requests whose prefill did not run on the pod the EPP named, by engine, outcome (failed, fallback-local, alternate, skipped) and reason.",
		}, []string{"engine", "outcome", "reason"}),
		KnobRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdgate_sidecar_knob_header_rejections_total",
			Help: "x-pdgate-sidecar-knobs values with an invalid item (the flag applied for that item).",
		}),
		DecoderPortRejections: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdgate_sidecar_decoder_port_header_rejections_total",
			Help: "x-pdgate-decoder-port values that are not a port in 1..65535 (the --engine-url port applied).",
		}),
		PhaseSeconds: telemetry.NewPhaseHistogram("Time a request spent in each of the sidecar's phases, in seconds " +
			"(sidecar_setup, prefill, handoff, decode_first_chunk)."),
		PrefillReleases: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdgate_sidecar_prefill_release_callbacks_total",
			Help: "Prefill-release callbacks to the EPP (x-pdgate-prefill-release) made when a prefill leg returned, by result (ok, http_error, transport_error, invalid_url).",
		}, []string{"result"}),
	}
	reg.MustRegister(m.Requests, m.Legs, m.PrefillSeconds, m.KVHandoffSeconds, m.Watchdog, m.Aborts,
		m.AllowlistRejections, m.PrefillRetries, m.InFlight, m.PrefillDiverted, m.KnobRejections, m.PrefillReleases,
		m.DecoderPortRejections, m.PhaseSeconds)
	return m
}

// WithAIBrixNames also registers AIBrix's failure counter on reg, so that AIBrix dashboards
// keep working: gateway_request_model_fail_total{status="pd_prefill_failure"|"pd_decode_watchdog",
// status_code} (AIBrix's gateway emits it; in pdgate the sidecar sees these failures).
func (m *Metrics) WithAIBrixNames(reg prometheus.Registerer) *Metrics {
	m.AIBrixFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gateway_request_model_fail_total",
		Help: "AIBrix-compatible name: requests failed by the P/D path, by status (pd_prefill_failure, pd_decode_watchdog) and status_code.",
	}, []string{"status", "status_code"})
	reg.MustRegister(m.AIBrixFailures)
	return m
}

// aibrixFailure counts a failure under AIBrix's name when enabled.
func (m *Metrics) aibrixFailure(status string, code int) {
	if m.AIBrixFailures != nil {
		m.AIBrixFailures.WithLabelValues(status, strconv.Itoa(code)).Inc()
	}
}
