// Package aibrixpdpair is AIBrix's PD selection as GIE plugins that compose with
// disagg-profile-handler: aibrix-pd-pair runs in the decode profile as a filter, picks the
// roleset pair (or a combined pod) atomically, publishes the choice in the CycleState, marks
// the prefill stage skipped for combined picks, and acts as the prefill decider;
// aibrix-pd-prefill-filter makes the prefill profile return exactly the paired prefill pod, so
// prefill and decode always come from the same roleset.
package aibrixpdpair

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/aibrix/internal/bucketplanner"
	"github.com/pdgate/pdgate/plugins/aibrix/internal/prefillpolicy"
	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Type is the plugin type name.
const Type = "aibrix-pd-pair"

// StateKey is the CycleState key holding the *PairState of the request.
const StateKey fwkplugin.StateKey = "pdgate.io/aibrix/pd-pair"

// PairState is the decision published for the prefill filter and other plugins.
type PairState struct {
	Decision Decision
	Decode   fwksched.Endpoint
	Prefill  fwksched.Endpoint // nil for combined picks

	// targets backs the one-endpoint answers of the decode and the prefill filter (Decode,
	// Prefill), so that neither allocates a slice per request.
	targets [2]fwksched.Endpoint
}

// Clone implements fwkplugin.StateData (the endpoints are the request's snapshot).
func (s *PairState) Clone() fwkplugin.StateData { c := *s; return &c }

var (
	_ fwksched.Filter      = (*Plugin)(nil)
	_ contract.Decider     = (*Plugin)(nil)
	_ fwkrc.ResponseHeader = (*Plugin)(nil)
	_ fwkrc.ResponseBody   = (*Plugin)(nil)
)

// Plugin is aibrix-pd-pair.
type Plugin struct {
	tn fwkplugin.TypedName
	// name is tn.String(), built once: Filter names the plugin in traces and logs on every
	// request, and TypedName.String concatenates a new string each time.
	name     string
	params   Params
	selector *Selector
	handle   fwkplugin.Handle
	log      logr.Logger
	// decider is prefillDeciderRef's plugin, resolved once the configuration is loaded.
	decider contract.Decider
	m       *pairMetrics
	handoff handoffCheck // compat.go
	// pods resolves the candidates' pod records once per metadata object, not per request.
	pods podmodel.Cache
}

// Factory builds the plugin.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	ctx := pluginkit.Context(handle)
	logger := log.FromContext(ctx).WithName(Type).WithValues("plugin", name)
	p, err := ParseParams(Type, name, raw, pluginkit.OSEnv, pdknobs.LogFallback(logger))
	if err != nil {
		return nil, err
	}
	reg := pluginkit.Registerer(handle)
	m, err := newPairMetrics(reg)
	if err != nil {
		return nil, pluginkit.Errorf(Type, name, "%w", err)
	}
	pl := New(name, p, handle, bucketplanner.New(bucketplanner.NewMetrics(reg)), logger)
	pl.m = m
	return pl, nil
}

// New builds the plugin from parsed parameters (tests and programmatic assemblies).
func New(name string, p Params, handle fwkplugin.Handle, planner *bucketplanner.Planner, logger logr.Logger) *Plugin {
	seed := p.Seed
	if seed == 0 {
		// the EPP's seed (pluginkit.WithSeed) makes a run reproducible; without one, the time
		if s, ok := pluginkit.SeedFor(handle, name); ok {
			seed = int64(s)
		} else {
			seed = time.Now().UnixNano()
		}
	}
	m, _ := newPairMetrics(prometheus.NewRegistry()) // a fresh registry cannot conflict; Factory passes the EPP's
	tn := fwkplugin.TypedName{Type: Type, Name: name}
	pl := &Plugin{tn: tn, name: tn.String(), params: p, handle: handle, log: logger, m: m}
	pl.selector = NewSelector(NewTracker(time.Duration(p.TrackerTTLSeconds)*time.Second, nil),
		prefillpolicy.NewPrefixTable(p.Knobs.PrefixCacheBlockSize, p.PrefixTableCapacity), pl.ledger, planner, seed)
	pl.selector.Warn = func(s string) { logger.Info("aibrix-pd-pair warning", "detail", s) }
	return pl
}

// Selector exposes the selection engine (tests, other plugins of this package).
func (p *Plugin) Selector() *Selector { return p.selector }

var _ contract.Clocked = (*Plugin)(nil)

// UseClock implements contract.Clocked: the pair's in-flight tracker and its decisions' times
// follow now (the simulation's virtual clock).
func (p *Plugin) UseClock(now func() time.Time) {
	p.selector.Now = now
	p.selector.Tracker.SetClock(now)
}

// ledger finds the pd-token-ledger through the handle, at first use.
func (p *Plugin) ledger() (tokenload.Ledger, tokenload.Defaults, error) {
	prov, err := tokenload.Lookup(p.handle, p.params.LedgerRef)
	if err != nil {
		return nil, tokenload.Defaults{}, err
	}
	return prov.TokenLedger(), prov.TokenLoadDefaults(), nil
}

// TypedName implements fwkplugin.Plugin.
func (p *Plugin) TypedName() fwkplugin.TypedName { return p.tn }

func header(req *fwksched.LLMRequest, name string) string {
	if req == nil {
		return ""
	}
	return protocol.HeaderValue(req.Headers, name)
}

var podsPool = sync.Pool{New: func() any { return new([]podmodel.Pod) }}

// Filter runs the whole selection and returns the decode target. When the request cannot be
// placed it records an early answer for the EPP (contract.Record: 503 no bucket/no pods, 400
// unknown strategy) and passes the candidates through unchanged, charging nothing.
func (p *Plugin) Filter(ctx context.Context, cs *fwksched.CycleState, req *fwksched.LLMRequest, eps []fwksched.Endpoint) []fwksched.Endpoint {
	trace := decisiontrace.FromCycleState(cs)
	name := p.name
	if req == nil || len(eps) == 0 {
		return eps
	}
	if contract.Recorded(ctx) != nil {
		trace.Note(name, "request already answered by another plugin; no selection")
		return eps
	}
	// The debug logger gets its values only when enabled: WithValues allocates on every call.
	logger := pluginkit.DebugLogger(ctx)
	if logger.Enabled() {
		logger = logger.WithValues("plugin", name, "requestID", req.RequestId)
	}
	// The pod records live in a pooled buffer for the length of the selection: the decision
	// keeps copies of the pods it names, never pointers into the records (Select), so they are
	// cleared and reused by the next request instead of a new 16-pod slice, the request path's
	// largest allocation, per request.
	buf := podsPool.Get().(*[]podmodel.Pod)
	pods := p.pods.AppendFromEndpoints((*buf)[:0], p.log, eps)
	defer func() {
		clear(pods)
		*buf = pods[:0]
		podsPool.Put(buf)
	}()
	if _, err := podmodel.ValidateEngines(pods); err != nil {
		return p.refuse(ctx, req, trace, eps, http.StatusServiceUnavailable, contract.CauseEngineMismatch, err.Error(), false)
	}
	in := p.input(req, pods)
	cfg := podmodel.ModelConfigOf(pods)
	_, prof := cfg.Resolve(in.ProfileHeader, in.Hints)
	strategy, source := ResolveStrategy(cfg, header(req, protocol.HeaderRoutingStrategy), p.params.HonorHeader(), prof, p.params.DefaultRoutingStrategy)
	if !slices.Contains(KnownStrategies, strategy) {
		return p.refuse(ctx, req, trace, eps, http.StatusBadRequest, contract.CauseUnknownStrategy, fmt.Sprintf("unknown routing strategy %q (from %s); pdgate supports %s",
			strategy, source, strings.Join(KnownStrategies, ", ")), true)
	}
	knobs, err := p.params.Knobs.ForProfile(prof, func(s string) { p.log.Info("ignoring profile override", "detail", s) })
	if err != nil {
		return p.refuse(ctx, req, trace, eps, http.StatusServiceUnavailable, contract.CauseBadProfile, err.Error(), true)
	}
	in.Knobs = knobs
	in.CombinedOverflow = p.params.CombinedOverflow
	in.DecodeFirst = p.params.DecodeFirst
	in.RemainingWork = p.params.RemainingWork
	in.Explain = trace != nil
	if p.decider != nil {
		in.PrefillNeeded = func(decode *podmodel.Pod) contract.Decision {
			ep := decode.Endpoint
			if ep == nil {
				ep = findEndpoint(eps, *decode)
			}
			return p.decider.Disaggregate(ctx, cs, req, ep)
		}
	}
	var d Decision
	if strategy == StrategyPD {
		d, err = p.selectPair(in) // Select, with compatible pairs only (compat.go)
	} else {
		d, err = p.selector.SelectSingle(in, strategy)
	}
	if err != nil {
		status, cause := StatusOf(err)
		return p.refuse(ctx, req, trace, eps, status, cause, err.Error(), true)
	}
	return p.publish(cs, req, trace, logger, eps, d, strategy)
}

// refuse records the early answer; routingError marks AIBrix's x-error-routing response header.
func (p *Plugin) refuse(ctx context.Context, req *fwksched.LLMRequest, trace *decisiontrace.Trace, eps []fwksched.Endpoint,
	status int, cause contract.Cause, msg string, routingError bool) []fwksched.Endpoint {
	a := contract.NewAnswer(status, cause, "routing_error", msg)
	if routingError {
		a.WithHeader("x-error-routing", "true")
	}
	contract.Record(ctx, a)
	p.m.selectFailures.WithLabelValues(strconv.Itoa(status)).Inc()
	trace.Stage("decode", false, fmt.Sprintf("%s: %d %s (%s)", p.tn.Name, status, msg, cause))
	p.log.V(logutil.DEBUG).Info("request not placed", "requestID", req.RequestId, "status", status, "reason", msg)
	return eps
}

// input extracts what the selector needs from the request.
func (p *Plugin) input(req *fwksched.LLMRequest, pods []podmodel.Pod) Input {
	in := Input{RequestID: req.RequestId, Model: req.TargetModel, Pods: pods,
		ProfileHeader: header(req, protocol.HeaderConfigProfile), SessionKey: header(req, protocol.HeaderSessionKey)}
	if len(in.SessionKey) > 256 {
		in.SessionKey = "" // AIBrix ignores session keys over 256 bytes
	}
	in.Hints.MaxTokens = -1
	if req.Body != nil {
		in.body = req.Body // the prompt text is built only for a prefix policy (promptText)
		if pm, ok := req.Body.Payload.(fwksched.PayloadMap); ok {
			for _, key := range []string{"max_tokens", "max_completion_tokens"} {
				if v, ok := pm[key].(float64); ok {
					in.Hints.MaxTokens = int(v)
					break
				}
			}
		}
	}
	in.PromptTokens = podmodel.PromptTokens(req)
	in.Hints.PromptTokens = in.PromptTokens
	in.BodyTokens = req.RequestSizeBytes / 4
	return in
}

func findEndpoint(eps []fwksched.Endpoint, pod podmodel.Pod) fwksched.Endpoint {
	if pod.Endpoint != nil {
		for _, ep := range eps {
			if ep == pod.Endpoint {
				return ep
			}
		}
	}
	for _, ep := range eps {
		if md := ep.GetMetadata(); md != nil && podmodel.FromMetadata(md).Key == pod.Key {
			return ep
		}
	}
	return nil
}

func (p *Plugin) publish(cs *fwksched.CycleState, req *fwksched.LLMRequest, trace *decisiontrace.Trace, logger logr.Logger,
	eps []fwksched.Endpoint, d Decision, strategy string) []fwksched.Endpoint {
	name := p.name
	st := &PairState{Decision: d, Decode: findEndpoint(eps, d.Decode)}
	if d.Prefill != nil {
		st.Prefill = findEndpoint(eps, *d.Prefill)
		st.targets[1] = st.Prefill
	}
	if trace != nil { // Note's arguments are boxed, an allocation each, whether or not it keeps them
		for _, n := range d.Notes {
			trace.Note(name, "%s", n)
		}
	}
	kind := "decode"
	if d.Combined {
		kind = "combined"
		cause := string(d.Cause)
		if d.Cause == contract.CauseStrategy {
			cause = "strategy_" + strategy
		}
		p.m.combinedPicks.WithLabelValues(cause).Inc()
		trace.Stage("combined", true, d.Reason)
		contract.MarkSkipPrefill(cs, "aibrix-pd-pair picked combined pod "+d.Decode.Key+": "+d.Reason)
	} else if d.DecodeOnly {
		kind = "decode_only"
		p.m.decodeOnly.WithLabelValues(string(d.Cause)).Inc()
		trace.Stage("prefill", false, d.Reason)
		contract.MarkSkipPrefill(cs, "aibrix-pd-pair kept "+d.Decode.Key+" without a prefill leg: "+d.Reason)
	} else {
		p.m.selectedPrefill.WithLabelValues(d.Prefill.Key, d.Roleset).Inc()
		if trace != nil {
			trace.Note(name, "%s", d.Reason)
		}
	}
	if d.PrefillFastPath {
		p.m.fastPaths.WithLabelValues("prefill").Inc()
	}
	if d.DecodeFastPath {
		p.m.fastPaths.WithLabelValues("decode").Inc()
	}
	p.m.selectedDecode.WithLabelValues(d.Decode.Key, d.Roleset, kind).Inc()
	if cs != nil {
		cs.Write(StateKey, st)
	}
	if logger.Enabled() { // a disabled Info still boxes its arguments, an allocation each
		logger.Info("aibrix pd decision", "decode", d.Decode.Key, "combined", d.Combined, "roleset", d.Roleset, "reason", d.Reason)
	}
	if st.Decode == nil {
		return eps
	}
	st.targets[0] = st.Decode
	return st.targets[:1:1]
}

// Disaggregate implements contract.Decider: prefill runs exactly when the pair chosen earlier
// in this cycle (the decode profile's Filter) has a prefill pod.
func (p *Plugin) Disaggregate(_ context.Context, cs *fwksched.CycleState, req *fwksched.LLMRequest, _ fwksched.Endpoint) contract.Decision {
	if req == nil {
		return contract.Decision{Cause: contract.CauseNoRequest, Reason: "no request"}
	}
	st, err := fwksched.ReadCycleStateKey[*PairState](cs, StateKey)
	if err != nil || st == nil {
		return contract.Decision{Cause: contract.CauseDecisionNotFound, Reason: "no aibrix pair decision in this scheduling cycle"}
	}
	if st.Decision.DecodeOnly {
		return contract.Decision{Cause: st.Decision.Cause, Reason: st.Decision.Reason}
	}
	if st.Prefill == nil {
		return contract.Decision{Cause: st.Decision.Cause, Reason: "combined pick: " + st.Decision.Reason}
	}
	return contract.Decision{Run: true, Cause: contract.CausePaired, Reason: pairedPrefillReason(st.Decision.Prefill.Key, st.Decision.Roleset)}
}

// pairedPrefillReason is fmt's "paired prefill %s in roleset %q", appended into a stack buffer
// instead of boxing both strings on every paired request.
func pairedPrefillReason(pod, roleset string) string {
	var buf [128]byte
	b := append(buf[:0], "paired prefill "...)
	b = append(b, pod...)
	b = append(b, " in roleset "...)
	b = strconv.AppendQuote(b, roleset)
	return string(b)
}

// ResolveReferences resolves prefillDeciderRef once every plugin exists (cmd/epp/pluginset).
func (p *Plugin) ResolveReferences(handle fwkplugin.Handle) error {
	ref := p.params.PrefillDeciderRef
	if ref == "" {
		return nil
	}
	if ref == p.tn.Name {
		return fmt.Errorf("%s: parameter prefillDeciderRef=%q names this plugin; name another prefill decider (e.g. prefix-based-pd-decider)", Type, ref)
	}
	pl := handle.Plugin(ref)
	if pl == nil {
		return fmt.Errorf("%s: parameter prefillDeciderRef=%q: no plugin of that name", Type, ref)
	}
	d, ok := pl.(contract.Decider)
	if !ok {
		return fmt.Errorf("%s: parameter prefillDeciderRef=%q: plugin type %s is not a prefill decider", Type, ref, pl.TypedName().Type)
	}
	p.decider = d
	return nil
}

// ResponseHeader: the prefill leg is over and the decode pod runs the request.
func (p *Plugin) ResponseHeader(_ context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, _ *fwkdl.EndpointMetadata) {
	if id := contract.RequestID(req, resp); id != "" {
		p.selector.Tracker.Started(id)
	}
}

// ResponseBody releases whatever is left at the end of the stream (errors, disconnects).
func (p *Plugin) ResponseBody(_ context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, _ *fwkdl.EndpointMetadata) {
	if resp == nil || !resp.EndOfStream {
		return
	}
	if id := contract.RequestID(req, resp); id != "" {
		p.selector.Tracker.Done(id)
	}
}
