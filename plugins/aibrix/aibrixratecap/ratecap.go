// Package aibrixratecap is aibrix-rate-cap: the per-model request-rate cap of AIBrix's
// model.aibrix.ai/config profiles (requestsPerSecond). Requests over the cap are answered 429
// by the EPP (a contract.Answer returned from AdmitRequest) before any scheduling or charge happens.
package aibrixratecap

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Type is the plugin type name.
const Type = "aibrix-rate-cap"

// window is the rate window: AIBrix caps requests per second.
const window = time.Second

// newRejected is the plugin's counter; Factory registers it on the EPP's registerer.
func newRejected() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pdgate_rate_cap_rejected_total",
		Help: "Requests answered 429 because their model exceeded its requestsPerSecond cap.",
	}, []string{"model"})
}

// Params are the plugin's parameters.
type Params struct {
	// DefaultRequestsPerSecond caps models whose profile sets no requestsPerSecond (0 = none).
	DefaultRequestsPerSecond int `json:"defaultRequestsPerSecond"`
}

// Validate implements pluginkit.Validator.
func (p Params) Validate() error {
	if p.DefaultRequestsPerSecond < 0 {
		return fmt.Errorf("parameter defaultRequestsPerSecond=%d: must be >= 0", p.DefaultRequestsPerSecond)
	}
	return nil
}

// Plugin is aibrix-rate-cap (an admission plugin: it runs before scheduling).
type Plugin struct {
	tn  fwkplugin.TypedName
	p   Params
	now func() time.Time
	// rejected counts refusals; Factory swaps in the registered (possibly shared) collector.
	rejected *prometheus.CounterVec

	mu      sync.Mutex
	windows map[string][]time.Time // model → admitted request times within the window
}

var _ fwkrc.AdmissionPlugin = (*Plugin)(nil)

// Factory builds the plugin.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p Params
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return nil, err
	}
	pl := New(name, p, time.Now)
	var err error
	if pl.rejected, err = pluginkit.Register(pluginkit.Registerer(handle), pl.rejected); err != nil {
		return nil, pluginkit.Errorf(Type, name, "%w", err)
	}
	return pl, nil
}

// New builds the plugin with an injected clock.
func New(name string, p Params, now func() time.Time) *Plugin {
	return &Plugin{tn: fwkplugin.TypedName{Type: Type, Name: name}, p: p, now: now, windows: map[string][]time.Time{}, rejected: newRejected()}
}

// TypedName implements fwkplugin.Plugin.
func (p *Plugin) TypedName() fwkplugin.TypedName { return p.tn }

// Limit returns the cap for a request from its model's resolved profile.
func (p *Plugin) Limit(req *fwksched.LLMRequest, eps []fwksched.Endpoint) int {
	hints := podmodel.AutoHints{MaxTokens: -1, PromptTokens: podmodel.PromptTokens(req)}
	_, prof := podmodel.ModelConfigOfEndpoints(eps).Resolve(req.Headers[protocol.HeaderConfigProfile], hints)
	if prof != nil && prof.RequestsPerSecond > 0 {
		return prof.RequestsPerSecond
	}
	return p.p.DefaultRequestsPerSecond
}

// AdmitRequest admits the request or returns the 429 answer (with retry-after: 1, AIBrix's).
func (p *Plugin) AdmitRequest(_ context.Context, req *fwksched.LLMRequest, eps []fwksched.Endpoint) error {
	if req == nil {
		return nil
	}
	limit := p.Limit(req, eps)
	if limit <= 0 {
		return nil
	}
	if p.Admit(req.TargetModel, limit) {
		return nil
	}
	p.rejected.WithLabelValues(req.TargetModel).Inc()
	msg := fmt.Sprintf("model %q exceeded its rate limit of %d requests per second", req.TargetModel, limit)
	return contract.NewAnswer(http.StatusTooManyRequests, contract.CauseRateLimited, "rate_limit_exceeded", msg).
		WithHeader("retry-after", "1")
}

// Admit records a request for model if fewer than limit were admitted in the last second.
func (p *Plugin) Admit(model string, limit int) bool {
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.windows[model]
	i := 0
	for i < len(w) && now.Sub(w[i]) >= window {
		i++
	}
	w = w[i:]
	if len(w) >= limit {
		p.windows[model] = w
		return false
	}
	p.windows[model] = append(w, now)
	return true
}
