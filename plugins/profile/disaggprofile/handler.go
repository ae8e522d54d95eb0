// Package disaggprofile implements llm-d's disaggregation profile handlers on GIE v1.5.0:
// disagg-profile-handler (decode always; encode and prefill when their deciders approve;
// decode is the primary profile; writes the routing headers in PreRequest) and the deprecated
// pd-profile-handler.
package disaggprofile

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/routingheaders"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Plugin type names.
const (
	HandlerType   = "disagg-profile-handler"
	PDHandlerType = "pd-profile-handler"
)

var (
	_ fwksched.ProfileHandler = &Handler{}
	_ fwkrc.PreRequest        = &Handler{}
)

// Handler is disagg-profile-handler.
type Handler struct {
	typedName fwkplugin.TypedName
	// decisions counts decisions; Factory registers it on the EPP's registerer (shared by instances).
	decisions *prometheus.CounterVec
	params    Parameters
	handle    fwkplugin.Handle
	log       logr.Logger

	resolveOnce    sync.Once
	resolveErr     error
	prefillDecider contract.Decider
	encodeDecider  contract.Decider

	singles singles
	// pods resolves the decode pick's pod record once per metadata object, not per request.
	pods podmodel.Cache
}

// decisionRecorded marks, per cycle, that the decision metric was counted.
const decisionRecordedKey fwkplugin.StateKey = "pdgate.io/disagg/decision-recorded"

type flag struct{}

func (flag) Clone() fwkplugin.StateData { return flag{} }

// HandlerFactory creates disagg-profile-handler. Deciders named in the parameters are looked up
// now when already declared, or on first use when declared later in the plugin list; call
// ResolveReferences after all plugins are instantiated to get the error at startup.
func HandlerFactory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	ctx := pluginkit.Context(handle)
	p, err := ParseParameters(name, raw, loggerFrom(ctx))
	if err != nil {
		return nil, err
	}
	h := &Handler{typedName: fwkplugin.TypedName{Type: HandlerType, Name: name}, params: p, handle: handle, log: loggerFrom(ctx)}
	if h.decisions, err = pluginkit.Register(pluginkit.Registerer(handle), newDisaggDecisions()); err != nil {
		return nil, pluginkit.Errorf(HandlerType, name, "%w", err)
	}
	// Validate the references that can be checked now (declared earlier), so a wrong plugin
	// type fails at startup exactly like llm-d; names not yet declared are resolved later.
	if handle != nil {
		if err := h.checkDeclared(); err != nil {
			return nil, err
		}
	}
	// Unlike llm-d's, the handler neither consumes PrefixCacheMatchInfo nor creates its
	// producer: the plugins that read it declare it (prefix-based-pd-decider,
	// aibrix-prefill-scorer, GIE's prefix scorers and filter), and the EPP adds the producer for
	// them once the configuration is loaded (pluginset.ResolveReferences). With deciders that
	// never read it (always-disagg, aibrix-pd-pair) it would cost GIE's block hashing on every
	// request and an index that grows to pods × KV blocks.
	return h, nil
}

// NewHandler builds a handler from already-parsed parameters and resolved deciders (tests and
// programmatic assemblies).
func NewHandler(name string, p Parameters, prefill, encode contract.Decider) *Handler {
	h := &Handler{typedName: fwkplugin.TypedName{Type: HandlerType, Name: name}, params: p,
		prefillDecider: prefill, encodeDecider: encode, log: logr.Discard(), decisions: newDisaggDecisions()}
	h.resolveOnce.Do(func() {})
	return h
}

func (h *Handler) checkDeclared() error {
	for _, ref := range []struct{ stage, name string }{{"prefill", h.params.Deciders.Prefill}, {"encode", h.params.Deciders.Encode}} {
		if ref.name == "" {
			continue
		}
		if p := h.handle.Plugin(ref.name); p != nil {
			if _, ok := p.(contract.Decider); !ok {
				return fmt.Errorf("plugin %s does not implement %sDeciderPlugin", ref.name, ref.stage)
			}
		}
	}
	return nil
}

// ResolveReferences binds the configured deciders. It is idempotent; the EPP calls it after
// every plugin is instantiated so a missing decider is a startup error.
func (h *Handler) ResolveReferences(handle fwkplugin.Handle) error {
	if handle != nil && h.handle == nil {
		h.handle = handle
	}
	h.resolveOnce.Do(func() { h.resolveErr = h.resolve() })
	return h.resolveErr
}

func (h *Handler) resolve() error {
	var err error
	if h.prefillDecider, err = lookupDecider(h.handle, "prefill", h.params.Deciders.Prefill); err != nil {
		return err
	}
	if h.encodeDecider, err = lookupDecider(h.handle, "encode", h.params.Deciders.Encode); err != nil {
		return err
	}
	return nil
}

func lookupDecider(handle fwkplugin.Handle, stage, name string) (contract.Decider, error) {
	if name == "" {
		return nil, nil
	}
	if handle == nil {
		return nil, fmt.Errorf("deciders.%s plugin not found: %s", stage, name)
	}
	p := handle.Plugin(name)
	if p == nil {
		return nil, fmt.Errorf("deciders.%s plugin not found: %s", stage, name)
	}
	d, ok := p.(contract.Decider)
	if !ok {
		return nil, fmt.Errorf("plugin %s does not implement %sDeciderPlugin", name, stage)
	}
	return d, nil
}

// TypedName implements fwkplugin.Plugin.
func (h *Handler) TypedName() fwkplugin.TypedName { return h.typedName }

// Params returns the effective parameters.
func (h *Handler) Params() Parameters { return h.params }

func (h *Handler) deciders(ctx context.Context) (contract.Decider, contract.Decider) {
	if err := h.ResolveReferences(nil); err != nil {
		// Only reachable when the EPP did not resolve at startup: disable the optional
		// stages rather than fail every request.
		log.FromContext(ctx).Error(err, "disagg-profile-handler: decider reference unresolved, optional stages disabled", "plugin", h.typedName.String())
		return nil, nil
	}
	return h.prefillDecider, h.encodeDecider
}

// Pick implements fwksched.ProfileHandler. It is called repeatedly until it returns no profile.
func (h *Handler) Pick(ctx context.Context, cs *fwksched.CycleState, request *fwksched.LLMRequest,
	profiles map[string]fwksched.SchedulerProfile, results map[string]*fwksched.ProfileRunResult) map[string]fwksched.SchedulerProfile {
	if request == nil {
		return noProfile
	}
	// The debug logger gets its values only when enabled: WithValues allocates on every call
	// (log.FromContext calls it too), and a disabled Info still boxes its arguments, so each
	// call below is guarded; the stages' reasons are built only for a log or a trace.
	logger := pluginkit.DebugLogger(ctx)
	debug := logger.Enabled()
	if debug {
		logger = logger.WithValues("plugin", h.typedName.String(), "requestID", request.RequestId)
	}
	trace := decisiontrace.FromCycleState(cs)
	explain := debug || trace != nil
	prefillDecider, encodeDecider := h.deciders(ctx)
	pf := h.params.Profiles

	// prefill-first: pick the prefill endpoint before decode, so decode's plugins (topology
	// affinity) can follow it. Without a decider prefill always runs (llm-d's prefill-first);
	// with one (pdgate's extension) the decider still judges it once decode is known.
	if h.params.StageOrder == PrefillFirst {
		if _, has := profiles[pf.Prefill]; has {
			if _, ran := results[pf.Prefill]; !ran {
				if debug {
					logger.Info("running prefill profile first", "stageOrder", PrefillFirst)
				}
				return h.singles.of(pf.Prefill, profiles)
			}
			if pr := results[pf.Prefill]; pr != nil && len(pr.TargetEndpoints) > 0 {
				if _, published := contract.PrefillResult(cs); !published && cs != nil {
					cs.Write(contract.PrefillResultKey, &contract.StageResult{Profile: pf.Prefill, Endpoints: endpoints(pr)})
				}
			}
		}
	}

	decodeRes, decodeRan := results[pf.Decode]
	if !decodeRan {
		if _, ok := profiles[pf.Decode]; !ok {
			log.FromContext(ctx).Error(nil, "decode profile is not configured", "plugin", h.typedName.String(), "profile", pf.Decode)
			trace.Stage("decode", false, fmt.Sprintf("decode profile %q is not configured", pf.Decode))
			return noProfile
		}
		return h.singles.of(pf.Decode, profiles)
	}
	if decodeRes == nil || len(decodeRes.TargetEndpoints) == 0 {
		if debug {
			logger.Info("decode profile found no endpoint; remaining stages skipped", "profile", pf.Decode)
		}
		trace.Stage("decode", false, "decode profile found no endpoint")
		return noProfile
	}
	decodeEp := decodeRes.TargetEndpoints[0]
	if _, published := contract.DecodeResult(cs); !published {
		if cs != nil {
			cs.Write(contract.DecodeResultKey, &contract.StageResult{Profile: pf.Decode, Endpoints: endpoints(decodeRes)})
		}
		if trace != nil {
			trace.Stage("decode", true, "decode is the primary stage: "+endpointName(decodeEp))
		}
	}

	if _, has := profiles[pf.Encode]; has {
		if _, evaluated := results[pf.Encode]; !evaluated {
			run, reason := h.decide(ctx, cs, request, encodeDecider, decodeEp, contract.SkipEncodeKey, "encode", false, explain)
			if debug {
				logger.Info("encode stage decision", "run", run, "reason", reason)
			}
			trace.Stage("encode", run, reason)
			if run {
				return h.singles.of(pf.Encode, profiles)
			}
			results[pf.Encode] = nil // evaluated: do not ask the decider again this cycle
		}
	}

	if _, has := profiles[pf.Prefill]; has {
		pr, evaluated := results[pf.Prefill]
		ranFirst := h.params.StageOrder == PrefillFirst && evaluated && !h.prefillJudged(cs)
		if !evaluated || ranFirst {
			var run bool
			var reason string
			if ranFirst && prefillDecider == nil {
				run, reason = h.prefillFirstUndecided(cs, request, decodeEp, explain)
			} else {
				run, reason = h.decide(ctx, cs, request, prefillDecider, decodeEp, contract.SkipPrefillKey, "prefill", h.params.CombinedDecodeSkipsPrefill, explain)
			}
			if ranFirst {
				h.markPrefillJudged(cs)
				if run && (pr == nil || len(pr.TargetEndpoints) == 0) {
					run = false
					if explain {
						reason += "; but the prefill profile found no endpoint"
					}
				}
				if !run {
					results[pf.Prefill] = nil
				}
			}
			if debug {
				logger.Info("prefill stage decision", "run", run, "reason", reason, "stageOrder", h.params.StageOrder)
			}
			trace.Stage("prefill", run, reason)
			if run && !ranFirst {
				return h.singles.of(pf.Prefill, profiles)
			}
			if !ranFirst {
				results[pf.Prefill] = nil
			}
		}
	}

	h.recordDecision(ctx, cs, request, results)
	return noProfile
}

// prefillFirstUndecided is llm-d's prefill-first without a decider: the prefill stage always
// runs, unless a decode-profile plugin marked it skipped (handoff-compat-filter, when no decode
// pod can take the prefill pick's KV) or the decode pick is a combined pod that prefills
// locally (combinedDecodeSkipsPrefill). The reason is built only when explain is set.
func (h *Handler) prefillFirstUndecided(cs *fwksched.CycleState, request *fwksched.LLMRequest, decodeEp fwksched.Endpoint, explain bool) (bool, string) {
	if reason, skip := contract.ReadSkip(cs, contract.SkipPrefillKey); skip {
		return false, skipReason(reason, explain)
	}
	if h.params.CombinedDecodeSkipsPrefill {
		if reason, combined := h.combinedPod(request, decodeEp); combined {
			return false, reason
		}
	}
	return true, "stageOrder prefill-first without deciders.prefill: prefill always runs"
}

const prefillJudgedKey fwkplugin.StateKey = "pdgate.io/disagg/prefill-judged"

func (h *Handler) prefillJudged(cs *fwksched.CycleState) bool {
	if cs == nil {
		return false
	}
	_, err := cs.Read(prefillJudgedKey)
	return err == nil
}

func (h *Handler) markPrefillJudged(cs *fwksched.CycleState) {
	if cs != nil {
		cs.Write(prefillJudgedKey, flag{})
	}
}

// decide runs the stage's gates in order: skip marker, combined decode pod, decider. The
// reason is built only when explain is set (for a debug log or a decision trace).
func (h *Handler) decide(ctx context.Context, cs *fwksched.CycleState, request *fwksched.LLMRequest, d contract.Decider,
	decodeEp fwksched.Endpoint, skipKey fwkplugin.StateKey, stage string, combinedSkips, explain bool) (bool, string) {
	if d == nil {
		if !explain {
			return false, ""
		}
		return false, fmt.Sprintf("no deciders.%s configured: %s disaggregation disabled", stage, stage)
	}
	if reason, skip := contract.ReadSkip(cs, skipKey); skip {
		return false, skipReason(reason, explain)
	}
	if combinedSkips {
		if reason, combined := h.combinedPod(request, decodeEp); combined {
			return false, reason
		}
	}
	dec := d.Disaggregate(ctx, cs, request, decodeEp)
	if !explain {
		return dec.Run, ""
	}
	return dec.Run, fmt.Sprintf("%s: %s (%s)", d.TypedName().Name, dec.Reason, dec.Cause)
}

func skipReason(marker string, explain bool) string {
	if !explain {
		return ""
	}
	return "skip marker in cycle state: " + marker
}

func (h *Handler) recordDecision(ctx context.Context, cs *fwksched.CycleState, request *fwksched.LLMRequest, results map[string]*fwksched.ProfileRunResult) {
	if cs != nil {
		if _, err := cs.Read(decisionRecordedKey); err == nil {
			return
		}
		cs.Write(decisionRecordedKey, flag{})
	}
	encodeUsed := used(results[h.params.Profiles.Encode])
	prefillUsed := used(results[h.params.Profiles.Prefill])
	decision := DecisionType(encodeUsed, prefillUsed)
	h.decisions.WithLabelValues(modelLabel(request.TargetModel), decision).Inc()
	if logger := pluginkit.DebugLogger(ctx); logger.Enabled() {
		logger.Info("disaggregation decision", "plugin", h.typedName.String(),
			"requestID", request.RequestId, "model", request.TargetModel, "decision", decision)
	}
}

// ProcessResults implements fwksched.ProfileHandler: decode is primary; prefill and encode are
// included only when they ran and found endpoints (never as nil entries, which GIE's
// approx-prefix-cache-producer would dereference).
func (h *Handler) ProcessResults(ctx context.Context, cs *fwksched.CycleState, request *fwksched.LLMRequest,
	results map[string]*fwksched.ProfileRunResult) (*fwksched.SchedulingResult, error) {
	out, err := assemble(request, results, h.params.Profiles)
	if err != nil {
		return nil, err
	}
	return out, nil
}

func assemble(request *fwksched.LLMRequest, results map[string]*fwksched.ProfileRunResult, pf Profiles) (*fwksched.SchedulingResult, error) {
	if request == nil {
		return nil, fmt.Errorf("request is nil")
	}
	decode := results[pf.Decode]
	if !used(decode) {
		return nil, noDecodeEndpoint(pf.Decode)
	}
	out := &fwksched.SchedulingResult{PrimaryProfileName: pf.Decode,
		ProfileResults: map[string]*fwksched.ProfileRunResult{pf.Decode: decode}}
	for _, name := range []string{pf.Prefill, pf.Encode} {
		if name != pf.Decode && used(results[name]) {
			out.ProfileResults[name] = results[name]
		}
	}
	return out, nil
}

// PreRequest writes x-prefiller-host-port / x-encoder-hosts-ports (and the prefill pod hints)
// from the result, and clears them when the stage did not run.
func (h *Handler) PreRequest(ctx context.Context, request *fwksched.LLMRequest, result *fwksched.SchedulingResult) {
	if request == nil {
		return
	}
	w := routingheaders.Write(request, result, h.params.Profiles.Prefill, h.params.Profiles.Encode)
	routingheaders.LogWritten(ctx, h.typedName, request, w)
}

// noDecodeEndpoint is the answer when the decode profile found nothing: 503, the truthful
// status (GIE maps every scheduling error to 429, which clients read as "slow down").
func noDecodeEndpoint(profile string) error {
	return contract.NewAnswer(http.StatusServiceUnavailable, contract.CauseNoDecodeEndpoint, "routing_error",
		fmt.Sprintf("failed to find available decode workers: the %q profile found no endpoint", profile))
}

// noProfile is Pick's answer when no stage is left to run. GIE's scheduler stops at an empty
// answer and never writes to it, so it is nil rather than a new empty map per request.
var noProfile map[string]fwksched.SchedulerProfile

func used(r *fwksched.ProfileRunResult) bool { return r != nil && len(r.TargetEndpoints) > 0 }

func endpoints(r *fwksched.ProfileRunResult) []fwksched.Endpoint {
	return append([]fwksched.Endpoint(nil), r.TargetEndpoints...)
}

func endpointName(ep fwksched.Endpoint) string {
	if ep == nil || ep.GetMetadata() == nil {
		return "<nil>"
	}
	md := ep.GetMetadata()
	return md.NamespacedName.Name + "(" + protocol.FormatHostPort(md.Address, md.Port) + ")"
}
