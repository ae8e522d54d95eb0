// Package forecastadmitter is forecast-admitter: admission by forecast for P/D pools. For each
// request it forecasts the TTFT (prefill wait + prefill + KV transfer + first step) and the TPOT
// it would get on each candidate placement, from pd-token-ledger's leases and the engine's cost
// profile, and refuses it when no placement meets its objective: 429 with llm-d's
// x-llm-d-request-dropped-reason (rejected-saturated, or rejected-ttl-expired when the prefill
// wait alone outlasts the client's x-llm-d-inference-ttl), 503 rejected-no-endpoints when no pod
// could decode it. It replaces the EPP's max(S_prefill, S_decode) saturation gate.
package forecastadmitter

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Type is the plugin type name.
const Type = "forecast-admitter"

// Request headers that carry a request's own objective (llm-d's SLO-aware routing names) and
// its queue deadline (llm-d v0.11); the drop-reason response header and its values.
const (
	HeaderSLOTTFT       = "x-slo-ttft-ms"
	HeaderSLOTPOT       = "x-slo-tpot-ms"
	HeaderInferenceTTL  = "x-llm-d-inference-ttl"
	DroppedReasonHeader = "x-llm-d-request-dropped-reason"
	ReasonSaturated     = "rejected-saturated"
	ReasonTTLExpired    = "rejected-ttl-expired"
	ReasonNoEndpoints   = "rejected-no-endpoints"
)

// Causes of the answers.
const (
	CauseForecastMiss contract.Cause = "forecast_slo_miss"
	CauseQueueTTL     contract.Cause = "queue_ttl_expired"
	CauseNoCapacity   contract.Cause = "no_capacity"
)

// Admitter is forecast-admitter.
type Admitter struct {
	tn      fwkplugin.TypedName
	p       Parameters
	m       *metrics
	mu      sync.Mutex
	leases  tokenload.LeaseReader
	reqCost float64
	stages  []contract.StageClassifier
	// outMean is the mean output budget of recently admitted requests (max_tokens, else the
	// profile's mean), an exponential average: what the sequences the leases hold will grow to.
	outMean float64
	// scratch buffers for one request's candidates (AdmitRequest holds mu)
	keys []tokenload.PodKey
	got  []tokenload.Leases
	pods []Pod
}

var (
	_ fwkrc.AdmissionPlugin           = (*Admitter)(nil)
	_ contract.SaturationGateReplacer = (*Admitter)(nil)
)

// Factory builds the admitter; its ledger is resolved once the whole config is loaded.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p, err := ParseParameters(name, raw)
	if err != nil {
		return nil, err
	}
	a := New(name, p)
	if err := registerMetrics(pluginkit.Registerer(handle), &a.m); err != nil {
		return nil, pluginkit.Errorf(Type, name, "%w", err)
	}
	return a, nil
}

// New builds the admitter from parameters ParseParameters returned, with its own metrics;
// SetLedger or ResolveReferences gives it leases.
func New(name string, p Parameters) *Admitter {
	return &Admitter{tn: pluginkit.TypedName(Type, name), p: p, m: newMetrics()}
}

// TypedName implements fwkplugin.Plugin.
func (a *Admitter) TypedName() fwkplugin.TypedName { return a.tn }

// ReplacesSaturationGate implements contract.SaturationGateReplacer.
func (a *Admitter) ReplacesSaturationGate() bool { return true }

// ResolveReferences finds the ledger and the deciders that classify requests by stage.
func (a *Admitter) ResolveReferences(h fwkplugin.Handle) error {
	prov, err := tokenload.Lookup(h, a.p.LedgerRef)
	if err != nil {
		return pluginkit.Errorf(Type, a.tn.Name, "parameter ledgerRef: %w", err)
	}
	lr, ok := prov.TokenLedger().(tokenload.LeaseReader)
	if !ok {
		return pluginkit.Errorf(Type, a.tn.Name, "parameter ledgerRef: ledger %q exposes no leases", a.p.LedgerRef)
	}
	a.SetLedger(lr, prov.TokenLoadDefaults().RequestCost)
	a.stages = contract.StageClassifiers(h.GetAllPlugins())
	return nil
}

// SetLedger sets the leases read and the ledger's per-leg prefill request cost.
func (a *Admitter) SetLedger(lr tokenload.LeaseReader, requestCost float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.leases, a.reqCost = lr, requestCost
}

// AdmitRequest implements fwkrc.AdmissionPlugin.
func (a *Admitter) AdmitRequest(ctx context.Context, req *fwksched.LLMRequest, eps []fwksched.Endpoint) error {
	if req == nil {
		return nil
	}
	class := classSheddable
	if req.Objectives.Priority >= 0 {
		class = classCritical
	}
	if class == classCritical && !a.p.ShedCritical {
		// never refused: no forecast (the request path's cost stays that of the gate, which
		// skips critical requests too); its output budget still joins the leased outputs' mean
		out := podmodel.RequestHints(req).MaxTokens
		if out <= 0 {
			out = a.p.Cost.MeanOutputTokens
		}
		a.m.decided(class, decisionAdmittedCritical)
		a.admitted(Forecast{Output: out})
		return nil
	}
	ttft, tpot := a.objective(req.Headers)
	waited := contract.QueueWait(ctx)
	f := a.forecast(req, eps, remaining(ttft, waited), tpot)
	f.TTFT += waited
	a.m.observe(f)
	switch {
	case f.Serving == 0:
		a.m.decided(class, ReasonNoEndpoints)
		return answer(http.StatusServiceUnavailable, CauseNoCapacity, ReasonNoEndpoints, "no endpoint can decode the request")
	case f.Met:
		a.m.decided(class, decisionAdmitted)
		a.admitted(f)
		return nil
	}
	reason, cause := ReasonSaturated, CauseForecastMiss
	if ttl, ok := queueTTL(req.Headers); ok && waited+f.PrefillWait > ttl {
		reason, cause = ReasonTTLExpired, CauseQueueTTL
	}
	a.m.decided(class, reason)
	msg := fmt.Sprintf("%s: no placement meets the objective (TTFT %v, TPOT %v): best forecast TTFT %v (queued %v, prefill wait %v), TPOT %v",
		Type, ttft, tpot, f.TTFT.Round(time.Millisecond), waited.Round(time.Millisecond), f.PrefillWait.Round(time.Millisecond),
		f.TPOT.Round(10*time.Microsecond))
	if l := pluginkit.DebugLogger(ctx); l.Enabled() {
		l.Info("request refused by forecast", "plugin", a.tn.String(), "requestID", req.RequestId, "reason", reason,
			"ttftTarget", ttft, "tpotTarget", tpot, "ttft", f.TTFT, "tpot", f.TPOT, "queued", waited, "prefillWait", f.PrefillWait)
	}
	return answer(http.StatusTooManyRequests, cause, reason, msg)
}

// outputWeight is the weight of each admitted request in the mean output budget (about the
// last 64 requests).
const outputWeight = 1.0 / 64

// admitted folds an admitted request's output budget into the mean.
func (a *Admitter) admitted(f Forecast) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.outMean == 0 {
		a.outMean = float64(f.Output)
		return
	}
	a.outMean += outputWeight * (float64(f.Output) - a.outMean)
}

// forecast reads every candidate's leases and predicts the request on them.
func (a *Admitter) forecast(req *fwksched.LLMRequest, eps []fwksched.Endpoint, ttft, tpot time.Duration) Forecast {
	d := Demand{PromptTokens: podmodel.PromptTokens(req), OutputTokens: podmodel.RequestHints(req).MaxTokens,
		DecodeOnly: a.decodeOnly(req)}
	a.mu.Lock()
	defer a.mu.Unlock()
	d.LeasedOutput = a.outMean
	a.keys, a.pods = a.keys[:0], a.pods[:0]
	for _, ep := range eps {
		if ep.GetMetadata() != nil {
			a.add(ep)
		}
	}
	a.readLeases("")
	return a.p.Cost.Predict(a.pods, d, scale(ttft, a.p.Headroom), scale(tpot, a.p.Headroom), a.reqCost)
}

// decodeOnly: every configured decider keeps the request on its decode pod whatever the pick.
func (a *Admitter) decodeOnly(req *fwksched.LLMRequest) bool {
	return contract.DecodeOnlyAtAdmission(a.stages, req)
}

// objective is the request's SLO headers where they carry a positive number of ms, else the
// configured targets.
func (a *Admitter) objective(h map[string]string) (ttft, tpot time.Duration) {
	return headerMs(h, HeaderSLOTTFT, a.p.ttft), headerMs(h, HeaderSLOTPOT, a.p.tpot)
}

func headerMs(h map[string]string, name string, def time.Duration) time.Duration {
	v := protocol.HeaderValue(h, name)
	if v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f > 0) || f > 1e9 {
		return def
	}
	return dur(f)
}

// queueTTL is the client's x-llm-d-inference-ttl (a positive Go duration), as flow control reads it.
func queueTTL(h map[string]string) (time.Duration, bool) {
	v := protocol.HeaderValue(h, HeaderInferenceTTL)
	if v == "" {
		return 0, false
	}
	d, err := time.ParseDuration(v)
	return d, err == nil && d > 0
}

func kindOf(labels map[string]string) Kind {
	switch podmodel.RoleOfLabels(labels) {
	case podmodel.RolePrefill, podmodel.RoleEncodePrefill:
		return KindPrefill
	case podmodel.RoleDecode, podmodel.RoleNone:
		return KindDecode
	case podmodel.RolePrefillDecode, podmodel.RoleEncodePrefillDecode, podmodel.RoleBoth:
		return KindCombined
	}
	return KindNone
}

func scale(d time.Duration, f float64) time.Duration { return time.Duration(float64(d) * f) }

// remaining is what is left of a TTFT objective once the request has waited in the EPP's
// admission queue (flow control); the forecast may take its headroom's share of that, since the
// wait is known and only what follows is forecast. None left leaves a microsecond, which no
// placement meets (a zero target would leave every placement's score undefined, and the
// forecast reported without its best placement).
func remaining(ttft, waited time.Duration) time.Duration {
	return max(ttft-waited, time.Microsecond)
}

// answer is the refusal with an OpenAI error body and llm-d's reason header.
func answer(status int, cause contract.Cause, reason, msg string) *contract.Answer {
	return contract.NewAnswer(status, cause, "", msg).WithHeader(DroppedReasonHeader, reason)
}
