package disaggprofile

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/deprecation"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// HeaderDataParallelHostPort is llm-d's data-parallel header, written by pd-profile-handler
// when primaryPort is set. It is a protocol.RoutingHeaders member: a client copy is dropped.
const HeaderDataParallelHostPort = protocol.HeaderDataParallelHostPort

// PDParameters are pd-profile-handler's parameters (llm-d's deprecated handler).
type PDParameters struct {
	DecodeProfile     string `json:"decodeProfile"`
	PrefillProfile    string `json:"prefillProfile"`
	PrefixPluginType  string `json:"prefixPluginType"`
	PrefixPluginName  string `json:"prefixPluginName"`
	PrimaryPort       int    `json:"primaryPort"`
	DeciderPluginName string `json:"deciderPluginName"`
}

// ParsePDParameters decodes, defaults and validates pd-profile-handler parameters.
func ParsePDParameters(name string, raw json.RawMessage) (PDParameters, error) {
	var r struct {
		DecodeProfile     *string `json:"decodeProfile"`
		PrefillProfile    *string `json:"prefillProfile"`
		PrefixPluginType  string  `json:"prefixPluginType"`
		PrefixPluginName  string  `json:"prefixPluginName"`
		PrimaryPort       int     `json:"primaryPort"`
		DeciderPluginName *string `json:"deciderPluginName"`
	}
	p := PDParameters{DecodeProfile: "decode", PrefillProfile: "prefill", PrefixPluginType: "prefix-cache-scorer",
		DeciderPluginName: "prefix-based-pd-decider"}
	if err := pluginkit.Decode(PDHandlerType, name, raw, &r); err != nil {
		return p, err
	}
	// An explicit empty profile name is accepted (llm-d test "empty decodeProfile is valid").
	if r.DecodeProfile != nil {
		p.DecodeProfile = *r.DecodeProfile
	}
	if r.PrefillProfile != nil {
		p.PrefillProfile = *r.PrefillProfile
	}
	if r.PrefixPluginType != "" {
		p.PrefixPluginType = r.PrefixPluginType
	}
	p.PrefixPluginName = r.PrefixPluginName
	if p.PrefixPluginName == "" {
		p.PrefixPluginName = p.PrefixPluginType
	}
	if r.DeciderPluginName != nil {
		p.DeciderPluginName = *r.DeciderPluginName
	}
	if p.DeciderPluginName == "" {
		return p, fmt.Errorf("decider plugin name is not defined")
	}
	if r.PrimaryPort != 0 && (r.PrimaryPort < 1 || r.PrimaryPort > 65535) {
		return p, fmt.Errorf("invalid primaryPort: must be between 1 and 65535, got %d", r.PrimaryPort)
	}
	p.PrimaryPort = r.PrimaryPort
	return p, nil
}

// PDHandler is the deprecated pd-profile-handler: decode first, then prefill when the decider
// approves; it writes no headers itself (pair it with disagg-headers-handler).
type PDHandler struct {
	typedName fwkplugin.TypedName
	decisions *prometheus.CounterVec // registered on the EPP's registerer by the factory
	params    PDParameters
	handle    fwkplugin.Handle
	log       logr.Logger

	resolveOnce sync.Once
	resolveErr  error
	decider     contract.Decider

	singles singles
}

// PDHandlerFactory creates pd-profile-handler.
func PDHandlerFactory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	ctx := pluginkit.Context(handle)
	p, err := ParsePDParameters(name, raw)
	if err != nil {
		return nil, err
	}
	logger := log.FromContext(ctx)
	deprecation.Once(ctx, PDHandlerType, "Deprecated: pd-profile-handler is deprecated, use disagg-profile-handler instead")
	if p.PrimaryPort != 0 {
		logger.Info("Deprecated: primaryPort not needed with Istio >= 1.28.1", "plugin", name)
	}
	h := &PDHandler{typedName: fwkplugin.TypedName{Type: PDHandlerType, Name: name}, params: p, handle: handle, log: logger}
	if h.decisions, err = pluginkit.Register(pluginkit.Registerer(handle), newPDDecisions()); err != nil {
		return nil, pluginkit.Errorf(PDHandlerType, name, "%w", err)
	}
	if handle != nil {
		if pl := handle.Plugin(p.DeciderPluginName); pl != nil {
			if _, ok := pl.(contract.Decider); !ok {
				return nil, fmt.Errorf("decider plugin of type: %s does not implement pdDeciderPlugin", p.DeciderPluginName)
			}
		}
	}
	// The decider it names declares PrefixCacheMatchInfo (see Handler's factory).
	return h, nil
}

// ResolveReferences binds the decider (see Handler.ResolveReferences).
func (h *PDHandler) ResolveReferences(handle fwkplugin.Handle) error {
	if handle != nil && h.handle == nil {
		h.handle = handle
	}
	h.resolveOnce.Do(func() {
		if h.handle == nil {
			h.resolveErr = fmt.Errorf("invalid decider plugin type: %s", h.params.DeciderPluginName)
			return
		}
		pl := h.handle.Plugin(h.params.DeciderPluginName)
		if pl == nil {
			h.resolveErr = fmt.Errorf("invalid decider plugin type: %s", h.params.DeciderPluginName)
			return
		}
		d, ok := pl.(contract.Decider)
		if !ok {
			h.resolveErr = fmt.Errorf("decider plugin of type: %s does not implement pdDeciderPlugin", h.params.DeciderPluginName)
			return
		}
		h.decider = d
	})
	return h.resolveErr
}

// TypedName implements fwkplugin.Plugin.
func (h *PDHandler) TypedName() fwkplugin.TypedName { return h.typedName }

// Params returns the effective parameters.
func (h *PDHandler) Params() PDParameters { return h.params }

// Pick runs decode, then prefill when the decider approves. Unlike disagg-profile-handler the
// decision metric is recorded when the decider is asked (llm-d's order).
func (h *PDHandler) Pick(ctx context.Context, cs *fwksched.CycleState, request *fwksched.LLMRequest,
	profiles map[string]fwksched.SchedulerProfile, results map[string]*fwksched.ProfileRunResult) map[string]fwksched.SchedulerProfile {
	none := map[string]fwksched.SchedulerProfile{}
	if request == nil {
		return none
	}
	trace := decisiontrace.FromCycleState(cs)
	decodeRes, decodeRan := results[h.params.DecodeProfile]
	if !decodeRan {
		if _, ok := profiles[h.params.DecodeProfile]; !ok {
			trace.Stage("decode", false, fmt.Sprintf("decode profile %q is not configured", h.params.DecodeProfile))
			return none
		}
		return h.singles.of(h.params.DecodeProfile, profiles)
	}
	if _, prefillRan := results[h.params.PrefillProfile]; prefillRan || len(profiles) == len(results) || !used(decodeRes) {
		return none
	}
	if _, ok := profiles[h.params.PrefillProfile]; !ok {
		return none
	}
	decodeEp := decodeRes.TargetEndpoints[0]
	if _, published := contract.DecodeResult(cs); !published && cs != nil {
		cs.Write(contract.DecodeResultKey, &contract.StageResult{Profile: h.params.DecodeProfile, Endpoints: endpoints(decodeRes)})
	}
	run, reason := false, ""
	if err := h.ResolveReferences(nil); err != nil {
		reason = err.Error()
		log.FromContext(ctx).Error(err, "pd-profile-handler: decider unresolved, P/D disabled")
	} else if skip, ok := contract.ReadSkip(cs, contract.SkipPrefillKey); ok {
		reason = "skip marker in cycle state: " + skip
	} else {
		dec := h.decider.Disaggregate(ctx, cs, request, decodeEp)
		run, reason = dec.Run, fmt.Sprintf("%s: %s (%s)", h.decider.TypedName().Name, dec.Reason, dec.Cause)
	}
	trace.Stage("prefill", run, reason)
	if l := pluginkit.DebugLogger(ctx); l.Enabled() {
		l.Info("prefill stage decision", "plugin", h.typedName.String(), "requestID", request.RequestId, "run", run, "reason", reason)
	}
	decision := DecisionDecodeOnly
	if run {
		decision = DecisionPrefillDecode
	}
	h.decisions.WithLabelValues(modelLabel(request.TargetModel), decision).Inc()
	if run {
		return h.singles.of(h.params.PrefillProfile, profiles)
	}
	return none
}

// ProcessResults: decode is primary. With primaryPort, the decode endpoint's original
// host:port goes into x-data-parallel-host-port and every decode endpoint's port is rewritten
// to primaryPort (llm-d's data-parallel routing through the primary rank).
func (h *PDHandler) ProcessResults(_ context.Context, _ *fwksched.CycleState, request *fwksched.LLMRequest,
	results map[string]*fwksched.ProfileRunResult) (*fwksched.SchedulingResult, error) {
	if request == nil {
		return nil, fmt.Errorf("request is nil")
	}
	decode := results[h.params.DecodeProfile]
	if !used(decode) {
		return nil, noDecodeEndpoint(h.params.DecodeProfile)
	}
	if h.params.PrimaryPort != 0 {
		md := decode.TargetEndpoints[0].GetMetadata()
		if request.Headers == nil {
			request.Headers = map[string]string{}
		}
		request.Headers[HeaderDataParallelHostPort] = protocol.FormatHostPort(md.Address, md.Port)
		rewritten := &fwksched.ProfileRunResult{}
		for _, ep := range decode.TargetEndpoints {
			info := ep.GetMetadata().Clone()
			info.Port = strconv.Itoa(h.params.PrimaryPort)
			rewritten.TargetEndpoints = append(rewritten.TargetEndpoints, fwksched.NewEndpoint(info, ep.GetMetrics().Clone(), ep.Clone()))
		}
		decode = rewritten
	}
	out := &fwksched.SchedulingResult{PrimaryProfileName: h.params.DecodeProfile,
		ProfileResults: map[string]*fwksched.ProfileRunResult{h.params.DecodeProfile: decode}}
	if pr := results[h.params.PrefillProfile]; h.params.PrefillProfile != h.params.DecodeProfile && used(pr) {
		out.ProfileResults[h.params.PrefillProfile] = pr
	}
	return out, nil
}
