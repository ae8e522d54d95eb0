package proxy

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// gatewayMetrics are the dev gateway's own metrics (its own registry: it is not the EPP).
type gatewayMetrics struct {
	requests     *prometheus.CounterVec
	duration     prometheus.Histogram
	eppFailures  *prometheus.CounterVec
	fallthroughs prometheus.Counter
}

func newGatewayMetrics(reg prometheus.Registerer) *gatewayMetrics {
	m := &gatewayMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdgate_gateway_requests_total",
			Help: "Requests answered by the dev gateway, by HTTP status (499: client went away).",
		}, []string{"code"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "pdgate_gateway_request_duration_seconds",
			Help:    "Whole-exchange duration at the dev gateway, streamed response included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		eppFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "pdgate_gateway_epp_failures_total",
			Help: "EPP stream failures (errors, message timeouts, protocol violations), by phase.",
		}, []string{"phase"}),
		fallthroughs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pdgate_gateway_upstream_fallthroughs_total",
			Help: "Upstream connect failures that fell through to the next listed endpoint.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.eppFailures, m.fallthroughs)
	}
	return m
}

func (m *gatewayMetrics) observe(code int, d time.Duration) {
	m.requests.WithLabelValues(strconv.Itoa(code)).Inc()
	m.duration.Observe(d.Seconds())
}
