// Package prefixdecider implements llm-d's prefix-based-pd-decider: it decides per request
// whether prefill runs on a remote prefill pod (the uncached suffix of the prompt on the
// picked decode pod is at least nonCachedTokens) and, as the conditional-decode gate, answers
// RFC 7240 "Prefer: if-available" requests with HTTP 412 when the decode pod does not hold
// enough of the prompt.
package prefixdecider

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/tokenestimate"
)

// Type is the plugin type name.
const Type = "prefix-based-pd-decider"

// Parameters of prefix-based-pd-decider.
type Parameters struct {
	// NonCachedTokens: disaggregate (and, for conditional decode, reject) when the uncached
	// suffix is >= this many tokens. 0 disables both decisions.
	NonCachedTokens int `json:"nonCachedTokens"`
	// PromptTokens: prompts shorter than this never disaggregate and are never rejected.
	PromptTokens int `json:"promptTokens"`
}

// ConditionalDecodeDecider is the conditional-decode gate extension (llm-d PR #1684's
// interface, returning a reason too). The first instance in the plugin list is the gate.
type ConditionalDecodeDecider interface {
	fwkplugin.Plugin
	ShouldRejectConditionalDecode(ctx context.Context, request *fwksched.LLMRequest, decodeEndpoint fwksched.Endpoint) (bool, string)
	IsConditionalDecodeGate() bool
}

var (
	_ contract.Decider               = &Decider{}
	_ ConditionalDecodeDecider       = &Decider{}
	_ contract.ConditionalDecodeGate = &Decider{}
)

// Decider is prefix-based-pd-decider.
type Decider struct {
	typedName fwkplugin.TypedName
	params    Parameters
	gate      bool // first ConditionalDecodeDecider configured
	// outcomes counts gate outcomes; Factory swaps in the registered (possibly shared) one.
	outcomes *prometheus.CounterVec
}

// ParseParameters decodes and validates the parameters.
func ParseParameters(name string, raw json.RawMessage) (Parameters, error) {
	var p Parameters
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return p, err
	}
	if p.NonCachedTokens < 0 {
		return p, fmt.Errorf("failed to create %s plugin: nonCachedTokens parameter of prefix disaggregation decider cannot be negative", Type)
	}
	if p.PromptTokens < 0 {
		return p, fmt.Errorf("failed to create %s plugin: promptTokens parameter of prefix disaggregation decider cannot be negative", Type)
	}
	return p, nil
}

// Factory creates prefix-based-pd-decider, which becomes the conditional-decode gate unless an
// earlier plugin already is. The producers of what it reads (Consumes) are added by the EPP
// once the whole plugin list exists (cmd/epp/pluginset).
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p, err := ParseParameters(name, raw)
	if err != nil {
		return nil, err
	}
	d := New(name, p)
	ctx := pluginkit.Context(handle)
	if handle != nil {
		for _, other := range handle.GetAllPlugins() {
			if g, ok := other.(ConditionalDecodeDecider); ok && g.IsConditionalDecodeGate() {
				d.gate = false
				log.FromContext(ctx).Info("Multiple ConditionalDecodeDecider plugins configured; ignoring later instance",
					"kept", g.TypedName().String(), "ignored", d.typedName.String())
				break
			}
		}
	}
	if p.NonCachedTokens == 0 {
		log.FromContext(ctx).Info("Prefix-based PD disabled (NonCachedTokens=0)", "plugin", d.typedName.String())
	}
	if d.outcomes, err = pluginkit.Register(pluginkit.Registerer(handle), d.outcomes); err != nil {
		return nil, pluginkit.Errorf(Type, name, "%w", err)
	}
	return d, nil
}

// New builds a decider that is the conditional-decode gate.
func New(name string, p Parameters) *Decider {
	return &Decider{typedName: fwkplugin.TypedName{Type: Type, Name: name}, params: p, gate: true, outcomes: newOutcomes()}
}

// TypedName implements fwkplugin.Plugin.
func (d *Decider) TypedName() fwkplugin.TypedName { return d.typedName }

// Params returns the effective parameters.
func (d *Decider) Params() Parameters { return d.params }

// IsConditionalDecodeGate reports whether this instance answers Prefer: if-available.
func (d *Decider) IsConditionalDecodeGate() bool { return d.gate }

// Consumes declares PrefixCacheMatchInfo and TokenizedPrompt so GIE's DAG runs their
// producers first.
func (d *Decider) Consumes() map[string]any {
	return map[string]any{
		attrprefix.PrefixCacheMatchInfoKey: attrprefix.PrefixCacheMatchInfo{},
		contract.TokenizedPromptKey:        contract.TokenizedPromptData{},
	}
}

// Suffix is the uncached-suffix computation behind both decisions.
type Suffix struct {
	PromptTokens    int
	MatchBlocks     int
	BlockSizeTokens int
	Uncached        int
}

// PromptTokenCount is len(TokenizedPrompt.TokenIDs); when no producer filled it (e.g. a
// programmatic assembly without token-producer) the estimate backend is used directly.
func PromptTokenCount(request *fwksched.LLMRequest) (int, error) {
	if request == nil {
		return 0, fmt.Errorf("request is nil")
	}
	if request.TokenizedPrompt != nil {
		return len(request.TokenizedPrompt.TokenIDs), nil
	}
	tp := tokenestimate.Estimate(request, tokenestimate.EstimateParams{})
	if tp == nil {
		return 0, fmt.Errorf("request has no prompt to count")
	}
	return len(tp.TokenIDs), nil
}

// ComputeSuffix returns the uncached suffix of the prompt on decodeEndpoint.
func ComputeSuffix(request *fwksched.LLMRequest, decodeEndpoint fwksched.Endpoint) (Suffix, error) {
	var s Suffix
	if decodeEndpoint == nil {
		return s, fmt.Errorf("decode endpoint is nil")
	}
	n, err := PromptTokenCount(request)
	if err != nil {
		return s, err
	}
	s.PromptTokens = n
	raw, ok := decodeEndpoint.Get(attrprefix.PrefixCacheMatchInfoKey)
	if !ok || raw == nil {
		return s, fmt.Errorf("unable to read prefix cache state of %s: no %s attribute", pluginkit.EndpointName(decodeEndpoint), attrprefix.PrefixCacheMatchInfoKey)
	}
	info, ok := raw.(*attrprefix.PrefixCacheMatchInfo)
	if !ok {
		return s, fmt.Errorf("wrong type of prefix cache match info on %s: %T", pluginkit.EndpointName(decodeEndpoint), raw)
	}
	s.MatchBlocks, s.BlockSizeTokens = info.MatchBlocks(), info.BlockSizeTokens()
	s.Uncached = n - s.MatchBlocks*s.BlockSizeTokens
	if s.Uncached < 0 {
		s.Uncached = 0
	}
	return s, nil
}

var _ contract.StageClassifier = (*Decider)(nil)

// DecodeOnlyAtAdmission implements contract.StageClassifier: a prompt shorter than
// nonCachedTokens stays decode-only whatever the cache holds (its uncached suffix is never
// longer than the prompt), and with nonCachedTokens 0 the decider never disaggregates. A longer
// prompt with a cache hit counts as needing a prefill: conservative.
func (d *Decider) DecodeOnlyAtAdmission(request *fwksched.LLMRequest) bool {
	if d.params.NonCachedTokens == 0 {
		return true
	}
	if request != nil && request.TokenizedPrompt == nil && tokenestimate.MinTokens(request) >= d.params.NonCachedTokens {
		return false // long enough without estimating it (admission runs before the token producer)
	}
	n, err := PromptTokenCount(request)
	return err == nil && n < d.params.NonCachedTokens
}

// Disaggregate implements contract.Decider. It fails open: missing prefix information means
// no disaggregation, logged as an error (the specification's choice: a missing producer is a
// configuration fault the operator must see).
func (d *Decider) Disaggregate(ctx context.Context, _ *fwksched.CycleState, request *fwksched.LLMRequest, decodeEndpoint fwksched.Endpoint) contract.Decision {
	dec := d.disaggregate(request, decodeEndpoint)
	id := ""
	if request != nil {
		id = request.RequestId
	}
	logger := pluginkit.Logger(ctx)
	if dec.Cause == contract.CauseNoPrefixInfo {
		logger.Error(nil, "prefix cache match information missing; prefill stays on the decode pod",
			"plugin", d.typedName.String(), "requestID", id, "reason", dec.Reason)
	}
	if dbg := logger.V(logutil.DEBUG); dbg.Enabled() {
		dbg.Info("prefill decision", "plugin", d.typedName.String(), "requestID", id, "disaggregate", dec.Run, "cause", dec.Cause, "reason", dec.Reason)
	}
	return dec
}

func (d *Decider) disaggregate(request *fwksched.LLMRequest, ep fwksched.Endpoint) contract.Decision {
	no := func(c contract.Cause, format string, args ...any) contract.Decision {
		return contract.Decision{Cause: c, Reason: fmt.Sprintf(format, args...)}
	}
	if d.params.NonCachedTokens == 0 {
		return no(contract.CauseNoDecider, "nonCachedTokens=0 disables prefix-based disaggregation")
	}
	if ep == nil {
		return no(contract.CauseNoProfile, "no decode endpoint")
	}
	n, err := PromptTokenCount(request)
	if err != nil {
		return no(contract.CauseNoRequest, "cannot count prompt tokens: %v", err)
	}
	if d.params.PromptTokens > 0 && n < d.params.PromptTokens {
		return no(contract.CauseShortPrompt, "prompt %d tokens < promptTokens %d", n, d.params.PromptTokens)
	}
	if n < d.params.NonCachedTokens {
		return no(contract.CauseShortPrompt, "prompt %d tokens < nonCachedTokens %d", n, d.params.NonCachedTokens)
	}
	s, err := ComputeSuffix(request, ep)
	if err != nil {
		return no(contract.CauseNoPrefixInfo, "fail open: %v", err)
	}
	if s.Uncached < d.params.NonCachedTokens {
		return no(contract.CauseCached, "uncached %d (prompt %d - cached %d×%d) < nonCachedTokens %d",
			s.Uncached, s.PromptTokens, s.MatchBlocks, s.BlockSizeTokens, d.params.NonCachedTokens)
	}
	return contract.Decision{Run: true, Cause: contract.CauseUncached, Reason: fmt.Sprintf("uncached %d (prompt %d - cached %d×%d) >= nonCachedTokens %d",
		s.Uncached, s.PromptTokens, s.MatchBlocks, s.BlockSizeTokens, d.params.NonCachedTokens)}
}

// ShouldRejectConditionalDecode implements the conditional-decode gate. It fails closed:
// when the cache cannot be shown to cover the prompt, the answer is 412.
func (d *Decider) ShouldRejectConditionalDecode(_ context.Context, request *fwksched.LLMRequest, ep fwksched.Endpoint) (bool, string) {
	if d.params.NonCachedTokens == 0 {
		return false, "nonCachedTokens=0 disables the conditional-decode gate"
	}
	if ep == nil {
		return true, "fail closed: no decode endpoint"
	}
	s, err := ComputeSuffix(request, ep)
	if err != nil {
		return true, "fail closed: " + err.Error()
	}
	if d.params.PromptTokens > 0 && s.PromptTokens < d.params.PromptTokens {
		return false, fmt.Sprintf("prompt %d tokens < promptTokens %d", s.PromptTokens, d.params.PromptTokens)
	}
	if s.Uncached < d.params.NonCachedTokens {
		return false, fmt.Sprintf("uncached %d (prompt %d - cached %d×%d) < nonCachedTokens %d on %s",
			s.Uncached, s.PromptTokens, s.MatchBlocks, s.BlockSizeTokens, d.params.NonCachedTokens, pluginkit.EndpointName(ep))
	}
	return true, fmt.Sprintf("uncached %d (prompt %d - cached %d×%d) >= nonCachedTokens %d on %s",
		s.Uncached, s.PromptTokens, s.MatchBlocks, s.BlockSizeTokens, d.params.NonCachedTokens, pluginkit.EndpointName(ep))
}
