package handoffcompat

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// CauseNoCompatible is the cause of a request whose decode pick no candidate prefill pod can
// hand KV to (or, prefill first, whose prefill pick no decode pod can take KV from): the
// decode-only decision's cause under LocalPrefill, the 503's under Fail.
const CauseNoCompatible contract.Cause = "no_compatible_prefill"

// Fallback is what a request gets when no compatible pair exists.
type Fallback string

// Fallbacks.
const (
	// LocalPrefill serves the request on the decode pick without a prefill leg: the decode
	// engine prefills the prompt itself, as when a decider keeps a short prompt local.
	LocalPrefill Fallback = "local-prefill"
	// Fail answers 503 with CauseNoCompatible.
	Fail Fallback = "error"
)

// ParseFallback reads a fallback parameter; "" is LocalPrefill.
func ParseFallback(param, s string) (Fallback, error) {
	switch Fallback(s) {
	case "", LocalPrefill:
		return LocalPrefill, nil
	case Fail:
		return Fail, nil
	}
	return "", fmt.Errorf("parameter %s=%q: must be %s or %s", param, s, LocalPrefill, Fail)
}

// metricLabel is the fallback as a metric label value.
func (f Fallback) metricLabel() string {
	if f == Fail {
		return "error"
	}
	return "local_prefill"
}

// Counter counts requests that found no compatible pair, by the attribute that kept the pairs
// apart and by the fallback taken. The plugins that enforce compatibility share it.
type Counter struct{ vec *prometheus.CounterVec }

// NewCounter registers pdgate_pd_no_compatible_pair_total on reg (or returns the one already
// registered there, so several plugins update one series set).
func NewCounter(reg prometheus.Registerer) (*Counter, error) {
	vec, err := pluginkit.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_pd_no_compatible_pair_total",
		Help: "Requests for which no prefill pod could hand KV to the decode pick (or no decode pod take it from the prefill pick), by the first attribute on which the candidate pairs differ and by the fallback taken (local_prefill, error).",
	}, []string{"reason", "fallback"}))
	if err != nil {
		return nil, fmt.Errorf("handoff compatibility metric: %w", err)
	}
	return &Counter{vec: vec}, nil
}

// Inc counts one request.
func (c *Counter) Inc(reason Attr, f Fallback) {
	if c != nil {
		c.vec.WithLabelValues(reason.String(), f.metricLabel()).Inc()
	}
}

// Count is one series' value (tests, diagnostics); 0 for a nil counter.
func (c *Counter) Count(reason Attr, f Fallback) float64 {
	var m dto.Metric
	if c == nil || c.vec.WithLabelValues(reason.String(), f.metricLabel()).Write(&m) != nil {
		return 0
	}
	return m.GetCounter().GetValue()
}

// FirstMismatch is the first attribute (in Attrs order) on which some spec of one side differs
// from some spec of the other: the reason a side found no partner. ok is false when every pair
// is compatible.
func FirstMismatch(side, others []Spec) (Attr, bool) {
	best, found := numAttrs, false
	for _, a := range side {
		for _, b := range others {
			if m, bad := Mismatch(a, b); bad && m < best {
				best, found = m, true
			}
		}
	}
	return best, found
}
