package pdtokenledger

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Type is the plugin type name. GIE already registers "token-load-scorer"; this is distinct.
const Type = "pd-token-ledger"

// Plugin owns one ledger instance and ties it to the request lifecycle: PreRequest confirms a
// scheduled request, the sidecar's prefill-release callback (contract.PrefillReleaser, with
// the EPP's --prefill-release-address) releases the prefill charge's active part when the
// prefill leg returns, ResponseHeader releases the prefill charge (the sidecar's prefill leg is
// over once response headers arrive; a release the callback made already is not repeated),
// ResponseBody at end of stream releases everything.
type Plugin struct {
	tn      fwkplugin.TypedName
	tracker *Tracker
	// runCtx is the handle's context: the janitor and the shared-ledger sync run on it once the
	// EPP has the whole plugin list (ResolveReferences) or at the plugin's first use, whichever
	// comes first, not from the factory, so building a plugin list starts nothing.
	runCtx context.Context

	mu         sync.Mutex
	reconciled time.Time // last AdmitRequest that reconciled the leases
}

var (
	_ fwkrc.AdmissionPlugin = (*Plugin)(nil)
	_ fwkrc.PreRequest      = (*Plugin)(nil)
	_ fwkrc.ResponseHeader  = (*Plugin)(nil)
	_ fwkrc.ResponseBody    = (*Plugin)(nil)
	_ tokenload.Provider    = (*Plugin)(nil)

	_ contract.PrefillReleaser = (*Plugin)(nil)
)

// Factory builds the plugin from its parameters (environment variables are the defaults); the
// janitor and the shared-ledger sync start on the handle's context when the EPP resolves the
// plugin list (ResolveReferences) or at first use.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	ctx := pluginkit.Context(handle)
	logger := log.FromContext(ctx).WithName(Type).WithValues("plugin", name)
	p, err := ParseParams(name, raw, pluginkit.OSEnv)
	if err != nil {
		return nil, err
	}
	reg := pluginkit.Registerer(handle)
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, pluginkit.Errorf(Type, name, "%w", err)
	}
	pl := New(name, NewTracker(Options{Params: p, Logger: logger, Metrics: m, Registerer: reg}))
	pl.runCtx = ctx
	if p.SharingEnabled() {
		logger.Info("Shared decode ledger enabled", "redis", p.Redis.Address, "replicaID", pl.tracker.ReplicaID())
	}
	return pl, nil
}

// New wraps an existing tracker (tests and custom assemblies).
func New(name string, t *Tracker) *Plugin {
	return &Plugin{tn: fwkplugin.TypedName{Type: Type, Name: name}, tracker: t}
}

func (p *Plugin) TypedName() fwkplugin.TypedName { return p.tn }

// TokenLedger implements Provider.
func (p *Plugin) TokenLedger() tokenload.Ledger {
	p.start()
	return p.tracker
}

// ResolveReferences is called by the EPP once every plugin exists (cmd/epp/pluginset): the
// ledger's background work starts here, before the first request, so a replica joins the
// shared ledger as soon as it runs.
func (p *Plugin) ResolveReferences(fwkplugin.Handle) error {
	p.start()
	return nil
}

// start runs the tracker's background work on the handle's context the first time the EPP uses
// the plugin (Tracker.Start runs once; a plugin built by New without a factory has no context
// and its owner starts the tracker).
func (p *Plugin) start() {
	if p.runCtx != nil {
		p.tracker.Start(p.runCtx)
	}
}

// TokenLoadDefaults implements Provider.
func (p *Plugin) TokenLoadDefaults() tokenload.Defaults { return p.tracker.TokenLoadDefaults() }

// Tracker returns the concrete ledger (snapshots, sweeps).
func (p *Plugin) Tracker() *Tracker { return p.tracker }

var (
	_ contract.Clocked = (*Plugin)(nil)
	_ contract.Swept   = (*Plugin)(nil)
)

// UseClock implements contract.Clocked: the ledger's TTLs and rates follow now, and its
// wall-clock janitor stops (the clock's owner calls Sweep).
func (p *Plugin) UseClock(now func() time.Time) { p.tracker.SetClock(clockFunc(now)) }

// Sweep implements contract.Swept: one janitor pass.
func (p *Plugin) Sweep() { p.tracker.Sweep() }

// SweepEvery implements contract.Swept: janitorIntervalSeconds.
func (p *Plugin) SweepEvery() time.Duration {
	return time.Duration(p.tracker.Params().JanitorIntervalSeconds) * time.Second
}

// clockFunc is a func() time.Time as a Clock.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// PreRequest runs only for requests that were scheduled; it exempts their charges from the
// unconfirmed sweep, leases encode work to the encoders the encode profile picked and records
// the request's output budget (max_tokens) on its decode charge.
func (p *Plugin) PreRequest(_ context.Context, req *fwksched.LLMRequest, res *fwksched.SchedulingResult) {
	p.start()
	if req == nil {
		return
	}
	t := p.tracker
	if enc := t.p.EncodeProfile; enc != "" && res != nil {
		if pr := res.ProfileResults[enc]; pr != nil && len(pr.TargetEndpoints) > 0 {
			pods := make([]tokenload.PodKey, 0, len(pr.TargetEndpoints))
			for _, ep := range pr.TargetEndpoints {
				if k, ok := endpointKey(ep); ok {
					pods = append(pods, k)
				}
			}
			t.ChargeEncode(req.RequestId, pods, time.Duration(t.p.TTLSeconds)*time.Second)
		}
	}
	t.Confirm(req.RequestId)
	// the decode scorers charge prompts only; the output budget, read from the body here, is
	// what the sequence's KV grows to (admission forecasts read it from the leases)
	t.RecordOutputBudget(req.RequestId, podmodel.RequestHints(req).MaxTokens)
}

// ReleasePrefillActive implements contract.PrefillReleaser: the sidecar reported that the
// request's prefill leg returned. Each part is released at most once, so ResponseHeader's
// later release of the same part (and a callback for a request already gone) is a no-op.
func (p *Plugin) ReleasePrefillActive(requestID string) {
	p.start()
	if requestID != "" {
		p.tracker.ReleasePrefillActive(requestID)
	}
}

// ResponseHeader releases the prefill charge: the active part on "ok" (or when the header is
// missing: first response headers are an upper bound of the prefill leg's end), both parts when
// the prefill leg failed, was skipped, fell back to local prefill or ran on the alternate (no KV
// stays on the charged prefill pod).
func (p *Plugin) ResponseHeader(ctx context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, _ *fwkdl.EndpointMetadata) {
	p.start()
	id := contract.RequestID(req, resp)
	if id == "" {
		return
	}
	var headers map[string]string
	if resp != nil {
		headers = resp.Headers
	}
	outcome := protocol.PrefillOutcome(headers)
	switch outcome {
	case protocol.PrefillOK, "":
		p.tracker.ReleasePrefillActive(id)
	case protocol.PrefillFailed, protocol.PrefillSkipped, protocol.PrefillFallbackLocal, protocol.PrefillAlternate:
		p.tracker.ReleasePrefill(id)
	default:
		pluginkit.DebugLogger(ctx).Info("Unknown prefill outcome; releasing the active part only", "requestID", id, "outcome", outcome)
		p.tracker.ReleasePrefillActive(id)
	}
}

// ResponseBody releases every remaining charge at end of stream: completion, failure and client
// disconnect (GIE forces a final EndOfStream call when a scheduled stream ends early).
func (p *Plugin) ResponseBody(_ context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, _ *fwkdl.EndpointMetadata) {
	p.start()
	if resp == nil || !resp.EndOfStream {
		return
	}
	if id := contract.RequestID(req, resp); id != "" {
		p.tracker.ReleaseAll(id)
	}
}
