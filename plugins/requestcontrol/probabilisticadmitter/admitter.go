// Package probabilisticadmitter is llm-d's probabilistic-admitter: an admission plugin that
// sheds sheddable requests (priority < 0) with a probability that rises steeply with pool
// saturation, min(sat^power × k, 1). pdgate measures saturation per P/D stage
// (plugins/lib/stagesat: the larger of the prefill and the decode tier's), so a prefill-heavy
// overload sheds before the prefill queue runs away while an idle decode tier does not dilute
// it. A rejection is a 429 answer with llm-d's reason header
// x-llm-d-request-dropped-reason: rejected-saturated (llm-d itself answers 500, see README).
package probabilisticadmitter

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/stagesat"
)

// Type is the plugin type name.
const Type = "probabilistic-admitter"

// DroppedReasonHeader is llm-d's drop-reason response header and its shedding value.
const (
	DroppedReasonHeader = "x-llm-d-request-dropped-reason"
	ReasonSaturated     = "rejected-saturated"
)

// CauseSaturated is the typed cause of a saturation shed (429).
const CauseSaturated contract.Cause = "saturated"

// newRejected is the admitter's counter; Factory registers it on the EPP's registerer.
func newRejected() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_probabilistic_admitter_rejected_total",
		Help: "Sheddable requests answered 429 by probabilistic-admitter, by the P/D stage whose saturation decided (prefill, decode, or effective for a pool without P/D roles).",
	}, []string{"stage"})
}

// Parameters are llm-d's parameters with llm-d's defaults.
type Parameters struct {
	QueueDepthThreshold  int     `json:"queueDepthThreshold"`
	KVCacheUtilThreshold float64 `json:"kvCacheUtilThreshold"`
	Power                float64 `json:"power"`
	K                    float64 `json:"k"`
}

// DefaultParameters are llm-d's defaults.
func DefaultParameters() Parameters {
	return Parameters{QueueDepthThreshold: 5, KVCacheUtilThreshold: 0.8, Power: 5.0, K: 300.0}
}

// ParseParameters decodes strictly, defaults and validates the parameters.
func ParseParameters(name string, raw json.RawMessage) (Parameters, error) {
	p := DefaultParameters()
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return Parameters{}, err
	}
	switch {
	case p.QueueDepthThreshold <= 0:
		return Parameters{}, fmt.Errorf("%s %q: parameter queueDepthThreshold=%d: must be > 0", Type, name, p.QueueDepthThreshold)
	case p.KVCacheUtilThreshold <= 0:
		return Parameters{}, fmt.Errorf("%s %q: parameter kvCacheUtilThreshold=%v: must be > 0", Type, name, p.KVCacheUtilThreshold)
	case p.Power <= 0:
		return Parameters{}, fmt.Errorf("%s %q: parameter power=%v: must be > 0", Type, name, p.Power)
	case p.K <= 0:
		return Parameters{}, fmt.Errorf("%s %q: parameter k=%v: must be > 0", Type, name, p.K)
	}
	return p, nil
}

// Admitter is probabilistic-admitter.
type Admitter struct {
	tn   fwkplugin.TypedName
	p    Parameters
	rand func() float64
	// rejected counts sheds; Factory swaps in the registered (possibly shared) collector.
	rejected *prometheus.CounterVec
}

var _ fwkrc.AdmissionPlugin = (*Admitter)(nil)

// Factory builds the admitter.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p, err := ParseParameters(name, raw)
	if err != nil {
		return nil, err
	}
	draw := rand.Float64
	if seed, ok := pluginkit.SeedFor(handle, name); ok {
		// the EPP's seed (bench sim --seed): the same load sheds the same requests
		r, mu := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), &sync.Mutex{}
		draw = func() float64 {
			mu.Lock()
			defer mu.Unlock()
			return r.Float64()
		}
	}
	a := New(name, p, draw)
	if a.rejected, err = pluginkit.Register(pluginkit.Registerer(handle), a.rejected); err != nil {
		return nil, pluginkit.Errorf(Type, name, "%w", err)
	}
	return a, nil
}

// New builds the admitter with an injected random source in [0, 1).
func New(name string, p Parameters, random func() float64) *Admitter {
	return &Admitter{tn: pluginkit.TypedName(Type, name), p: p, rand: random, rejected: newRejected()}
}

// TypedName implements fwkplugin.Plugin.
func (a *Admitter) TypedName() fwkplugin.TypedName { return a.tn }

// EndpointSaturation is llm-d's per-endpoint score max(q/Q, kv/K); an endpoint without
// metrics counts as saturated (1.0).
func (a *Admitter) EndpointSaturation(ep fwksched.Endpoint) float64 {
	m := ep.GetMetrics()
	if m == nil {
		return 1.0
	}
	return math.Max(float64(m.WaitingQueueSize)/float64(a.p.QueueDepthThreshold), m.KVCacheUsagePercent/a.p.KVCacheUtilThreshold)
}

// meanSaturation is the unweighted mean over eps.
func (a *Admitter) meanSaturation(eps []fwksched.Endpoint) float64 {
	if len(eps) == 0 {
		return 1.0
	}
	sum := 0.0
	for _, ep := range eps {
		sum += a.EndpointSaturation(ep)
	}
	return sum / float64(len(eps))
}

// Saturation is the stage-aware saturation of the candidates.
func (a *Admitter) Saturation(eps []fwksched.Endpoint) stagesat.Result {
	return stagesat.Saturation(eps, a.meanSaturation)
}

// Probability is the rejection probability at saturation sat.
func (a *Admitter) Probability(sat float64) float64 {
	return math.Min(math.Pow(sat, a.p.Power)*a.p.K, 1)
}

// AdmitRequest admits non-sheddable requests, and sheddable ones with probability 1 − p.
func (a *Admitter) AdmitRequest(ctx context.Context, req *fwksched.LLMRequest, eps []fwksched.Endpoint) error {
	if req == nil || req.Objectives.Priority >= 0 || len(eps) == 0 {
		return nil
	}
	sat := a.Saturation(eps)
	prob := a.Probability(sat.Effective)
	if a.rand() >= prob {
		return nil
	}
	a.rejected.WithLabelValues(sat.Limiting).Inc()
	msg := fmt.Sprintf("%s: rejected, saturation=%.3f (%s), prob=%.3f", Type, sat.Effective, sat.Limiting, prob)
	if l := pluginkit.DebugLogger(ctx); l.Enabled() {
		l.Info("sheddable request rejected", "plugin", a.tn.String(), "requestID", req.RequestId,
			"saturation", sat.Effective, "stage", sat.Limiting, "prefill", sat.Prefill, "decode", sat.Decode, "probability", prob)
	}
	return contract.NewAnswer(http.StatusTooManyRequests, CauseSaturated, "rate_limit_exceeded", msg).
		WithHeader(DroppedReasonHeader, ReasonSaturated)
}
