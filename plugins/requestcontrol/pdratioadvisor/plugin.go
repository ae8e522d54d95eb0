// Package pdratioadvisor is pd-ratio-advisor: from what the EPP itself sees of the requests
// it routes (prefill throughput per prefill pod, decode step time at the batch sizes seen,
// the arrival rate of prompt and output tokens, the KV transfer) it computes, per pool and
// role, the replicas it would run under the configured TTFT and TPOT targets, and why, with
// hysteresis so the advice does not flap. It exports them as gauges for an autoscaler and
// through contract.ReplicaAdvisor for the simulation's replica actuator. It never changes a
// routing decision.
package pdratioadvisor

import (
	"context"
	"encoding/json"
	"sort"
	"sync"
	"time"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/tokenestimate"
)

// Type is the plugin type name.
const Type = "pd-ratio-advisor"

// Roles the advisor sizes.
const (
	RolePrefill = "prefill"
	RoleDecode  = "decode"
	RoleEncode  = "encode"
)

// Reasons, the values of pdgate_advisor_reason's reason label.
const (
	// ReasonPrefillBound and ReasonDecodeBound: the role needs more replicas than it has.
	ReasonPrefillBound = "prefill_bound"
	ReasonDecodeBound  = "decode_bound"
	// ReasonOverprovisioned: the role has more replicas than the demand needs.
	ReasonOverprovisioned = "overprovisioned"
	// ReasonSteady: the advice is the current size.
	ReasonSteady = "steady"
	// ReasonNoData: too few completed requests in the window; the advice is the current size.
	ReasonNoData = contract.ReasonNoData
)

// Reasons lists every reason, in the order the gauges are written.
var Reasons = []string{ReasonPrefillBound, ReasonDecodeBound, ReasonOverprovisioned, ReasonSteady, ReasonNoData}

// Plugin is pd-ratio-advisor.
type Plugin struct {
	tn      fwkplugin.TypedName
	p       Parameters
	metrics *metrics

	mu       sync.Mutex
	now      func() time.Time
	win      *window
	flights  map[string]*flight
	pods     map[string]*podState
	current  map[string]int // replicas per role in the pool, from admission's candidates
	counted  time.Time
	kvTokens int
	stab     map[string]*stabilizer
	mix      mixMemory
	// measured is the engine side of the last window with enough completions: it outlives a
	// window of long requests that have not completed yet
	measured *Observation
	advice   []contract.ReplicaAdvice
	// stages classify a refused request's prompt as a prefill leg's or the decode pod's own
	stages []contract.StageClassifier

	// runCtx is the handle's context; stopLoop ends the wall-clock loop (UseClock).
	runCtx   context.Context
	loopOnce sync.Once
	stopLoop context.CancelFunc
	virtual  bool
}

// flight is one request between PreRequest and the end of its stream.
type flight struct {
	start           time.Time
	prefill, decode string // pod keys; prefill "" = prefilled on the decode pod
	prompt          int
	prefillEnded    bool
	releasedAt      time.Time // the prefill-release callback's time, zero without one
	headerAt        time.Time
	areaAtHeader    float64
}

// podState is the EPP's running account of one pod: its prefill legs in flight (busy time)
// and its requests past their first token (decode batch, integrated over time).
type podState struct {
	prefillInflight int
	busyMark        time.Time
	decodeInflight  int
	area            float64 // ∫ decodeInflight dt, seconds
	areaMark        time.Time
}

// The EPP finds its hooks, and the simulation its clock and advice, by these interfaces.
var (
	_ interface {
		fwkrc.AdmissionPlugin
		fwkrc.PreRequest
		fwkrc.ResponseHeader
		fwkrc.ResponseBody
	} = (*Plugin)(nil)
	_ interface {
		contract.PrefillReleaser
		contract.DemandObserver
		contract.ReplicaAdvisor
		contract.Clocked
		contract.Swept
	} = (*Plugin)(nil)
)

// Factory builds the plugin; its periodic estimate runs on the handle's context from the
// EPP's ResolveReferences (or first use) until the EPP stops or UseClock hands it to a
// virtual clock.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p, err := ParseParameters(name, raw)
	if err != nil {
		return nil, err
	}
	pl := New(name, p)
	if err := pl.metrics.register(pluginkit.Registerer(handle)); err != nil {
		return nil, pluginkit.Errorf(Type, name, "%w", err)
	}
	pl.runCtx = pluginkit.Context(handle)
	return pl, nil
}

// New builds the plugin on the wall clock with its own (unregistered) gauges.
func New(name string, p Parameters) *Plugin {
	return &Plugin{tn: pluginkit.TypedName(Type, name), p: p, metrics: newMetrics(), now: time.Now,
		win: newWindow(p.window()), flights: map[string]*flight{}, pods: map[string]*podState{},
		current: map[string]int{}, stab: map[string]*stabilizer{}, mix: mixMemory{lookback: p.mixLookback()}}
}

// TypedName implements fwkplugin.Plugin.
func (a *Plugin) TypedName() fwkplugin.TypedName { return a.tn }

// ResolveReferences finds the deciders that classify requests by stage and starts the periodic
// estimate once the EPP has every plugin.
func (a *Plugin) ResolveReferences(h fwkplugin.Handle) error {
	if h != nil {
		stages := contract.StageClassifiers(h.GetAllPlugins())
		a.mu.Lock()
		a.stages = stages
		a.mu.Unlock()
	}
	a.startLoop()
	return nil
}

func (a *Plugin) startLoop() {
	if a.runCtx == nil {
		return
	}
	a.loopOnce.Do(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.virtual {
			return
		}
		ctx, cancel := context.WithCancel(a.runCtx)
		a.stopLoop = cancel
		go pluginkit.Every(ctx, a.p.interval(), a.Sweep)
	})
}

// UseClock implements contract.Clocked: measurements and the estimate follow now, and the
// wall-clock loop stops (the clock's owner calls Sweep).
func (a *Plugin) UseClock(now func() time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.now, a.virtual = now, true
	if a.stopLoop != nil {
		a.stopLoop()
	}
}

// Sweep implements contract.Swept: one estimate, published to the gauges.
func (a *Plugin) Sweep() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.estimate(a.now())
}

// SweepEvery implements contract.Swept.
func (a *Plugin) SweepEvery() time.Duration { return a.p.interval() }

// ReplicaAdvice implements contract.ReplicaAdvisor: the advice of the last estimate.
func (a *Plugin) ReplicaAdvice() []contract.ReplicaAdvice {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]contract.ReplicaAdvice(nil), a.advice...)
}

// AdmitRequest admits everything: the candidates are the pool, and their roles are the
// current size the advice is compared with (counted at most once a second).
func (a *Plugin) AdmitRequest(_ context.Context, _ *fwksched.LLMRequest, pods []fwksched.Endpoint) error {
	a.startLoop()
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	if !a.counted.IsZero() && now.Sub(a.counted) < time.Second {
		return nil
	}
	a.counted = now
	clear(a.current)
	kv := 0
	for _, ep := range pods {
		md := ep.GetMetadata()
		if md == nil {
			continue
		}
		role := roleOf(md.Labels)
		if role == "" {
			continue
		}
		a.current[role]++
		if m := ep.GetMetrics(); role == RoleDecode && m != nil && m.KvCacheMaxTokenCapacity > 0 {
			if kv == 0 || m.KvCacheMaxTokenCapacity < kv {
				kv = m.KvCacheMaxTokenCapacity
			}
		}
	}
	a.kvTokens = kv
	return nil
}

// roleOf is the role the advisor sizes a pod under ("" = none: combined and unlabelled pods
// serve whole requests and are not part of a P:D ratio).
func roleOf(labels map[string]string) string {
	switch podmodel.RoleOfLabels(labels) {
	case podmodel.RolePrefill, podmodel.RoleEncodePrefill:
		return RolePrefill
	case podmodel.RoleDecode:
		return RoleDecode
	case podmodel.RoleEncode:
		return RoleEncode
	}
	return ""
}

// PreRequest records a scheduled request: its prompt (the tokenizer-free estimate) and
// its pods; the prefill pod is busy from now until the prefill leg ends.
func (a *Plugin) PreRequest(_ context.Context, req *fwksched.LLMRequest, res *fwksched.SchedulingResult) {
	if req == nil || req.RequestId == "" || res == nil {
		return
	}
	f := &flight{prompt: tokenestimate.MinTokens(req)}
	for name, pr := range res.ProfileResults {
		if pr == nil || len(pr.TargetEndpoints) == 0 {
			continue
		}
		md := pr.TargetEndpoints[0].GetMetadata()
		if md == nil {
			continue
		}
		switch {
		case name == res.PrimaryProfileName:
			f.decode = md.NamespacedName.String()
		case roleOf(md.Labels) == RolePrefill:
			f.prefill = md.NamespacedName.String()
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.now()
	f.start = now
	b := a.win.at(now)
	b.arrivals++
	if f.prefill != "" {
		b.remotePrompt += float64(f.prompt)
		ps := a.pod(f.prefill)
		a.advanceBusy(ps, now)
		ps.prefillInflight++
	} else {
		b.localPrompt += float64(f.prompt)
	}
	if old := a.flights[req.RequestId]; old != nil {
		a.drop(old, now)
	}
	a.flights[req.RequestId] = f
}

// ReleasePrefillActive implements contract.PrefillReleaser: the sidecar reported the prefill
// leg's end, the exact end of the prefill pod's busy time (without it the first response
// header ends it, which adds the KV transfer).
func (a *Plugin) ReleasePrefillActive(requestID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if f := a.flights[requestID]; f != nil && !f.prefillEnded {
		now := a.now()
		a.endPrefill(f, now)
		f.releasedAt = now
	}
}

// ResponseHeader: the first token; the request joins its decode pod's batch.
func (a *Plugin) ResponseHeader(_ context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, _ *fwkdl.EndpointMetadata) {
	id := contract.RequestID(req, resp)
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.flights[id]
	if f == nil || !f.headerAt.IsZero() {
		return
	}
	now := a.now()
	if !f.prefillEnded {
		a.endPrefill(f, now)
	} else if !f.releasedAt.IsZero() {
		b := a.win.at(now)
		b.transferSum += now.Sub(f.releasedAt).Seconds()
		b.transfers++
	}
	f.headerAt = now
	if f.decode != "" {
		ps := a.pod(f.decode)
		a.advanceArea(ps, now)
		ps.decodeInflight++
		f.areaAtHeader = ps.area
	}
}

// ResponseBody at end of stream completes the request: its output tokens, and its TPOT
// against the mean batch its decode pod ran meanwhile (a pair for the step fit).
func (a *Plugin) ResponseBody(_ context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, _ *fwkdl.EndpointMetadata) {
	if resp == nil || !resp.EndOfStream {
		return
	}
	id := contract.RequestID(req, resp)
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.flights[id]
	if f == nil {
		return
	}
	now := a.now()
	out := resp.Usage.CompletionTokens
	if !f.headerAt.IsZero() && out > 0 {
		b := a.win.at(now)
		b.completions++
		b.outputTokens += float64(out)
		b.completedPrompt += float64(f.prompt)
		if d := now.Sub(f.headerAt); out > 1 && d > 0 && f.decode != "" {
			ps := a.pod(f.decode)
			a.advanceArea(ps, now)
			batch := (ps.area - f.areaAtHeader) / d.Seconds()
			b.step.add(batch, d.Seconds()/float64(out-1))
			b.maxBatch = max(b.maxBatch, batch)
		}
	}
	a.drop(f, now)
	delete(a.flights, id)
}

// drop ends whatever f still holds on its pods.
func (a *Plugin) drop(f *flight, now time.Time) {
	if !f.prefillEnded && f.prefill != "" {
		ps := a.pod(f.prefill)
		a.advanceBusy(ps, now)
		ps.prefillInflight--
		f.prefillEnded = true
	}
	if !f.headerAt.IsZero() && f.decode != "" {
		ps := a.pod(f.decode)
		a.advanceArea(ps, now)
		ps.decodeInflight--
	}
}

func (a *Plugin) endPrefill(f *flight, now time.Time) {
	f.prefillEnded = true
	if f.prefill == "" {
		return
	}
	ps := a.pod(f.prefill)
	a.advanceBusy(ps, now)
	ps.prefillInflight--
	a.win.at(now).prefillTokens += float64(f.prompt)
}

func (a *Plugin) pod(key string) *podState {
	ps := a.pods[key]
	if ps == nil {
		now := a.now()
		ps = &podState{busyMark: now, areaMark: now}
		a.pods[key] = ps
	}
	return ps
}

// advanceBusy credits the pod's busy time up to now to the window.
func (a *Plugin) advanceBusy(ps *podState, now time.Time) {
	if ps.prefillInflight > 0 && now.After(ps.busyMark) {
		a.win.at(now).prefillBusy += now.Sub(ps.busyMark).Seconds()
	}
	ps.busyMark = now
}

func (a *Plugin) advanceArea(ps *podState, now time.Time) {
	if now.After(ps.areaMark) {
		ps.area += float64(ps.decodeInflight) * now.Sub(ps.areaMark).Seconds()
	}
	ps.areaMark = now
}

// estimate sizes the pool at now, passes each role through its stabilizer and publishes.
func (a *Plugin) estimate(now time.Time) {
	for key, ps := range a.pods {
		a.advanceBusy(ps, now)
		if ps.prefillInflight <= 0 && ps.decodeInflight <= 0 && now.Sub(ps.busyMark) > a.p.window() {
			delete(a.pods, key) // a pod gone from the pool (or idle for a whole window)
		}
	}
	obs := a.win.observation(now, a.kvTokens)
	for _, ps := range a.pods {
		obs.DecodeInflight += ps.decodeInflight
	}
	a.advice = a.advise(now, obs)
	a.metrics.publish(a.p.Pool, a.advice)
}

// advise is the estimate through hysteresis, one entry per role the pool has (or is advised).
//
// The engine side (prefill rate, step fit, largest batch, transfer, mean output) comes from
// the last window with minSamples completions, the demand side (arrival rates, requests
// decoding) from this one: after a shift to long outputs, completions stop for a while, and
// the pool must still be sized for what keeps arriving.
func (a *Plugin) advise(now time.Time, obs Observation) []contract.ReplicaAdvice {
	if obs.Requests >= a.p.MinSamples {
		if !a.p.stepMeetsTPOT(obs.Step) {
			// no batch meets the TPOT on this fit, so no decode tier would: more replicas
			// cannot lower a step below its base. Such a fit comes from a window that mixes
			// two workloads (the step grows with the tokens each sequence holds, which the
			// line against the batch does not see), and sizing on it advised hundreds of
			// decode pods at one phase change. The last usable fit stands instead, or none.
			obs.Step, obs.MaxBatch = StepFit{}, 0
			if m := a.measured; m != nil {
				obs.Step, obs.MaxBatch = m.Step, m.MaxBatch
			}
		}
		m := obs
		a.measured = &m
	} else if m := a.measured; m != nil {
		obs.PrefillRate, obs.Step, obs.MaxBatch, obs.Transfer = m.PrefillRate, m.Step, m.MaxBatch, m.Transfer
		if obs.Requests == 0 {
			obs.MeanOutput = m.MeanOutput
			obs.OutputRate = obs.OutputRate + float64(obs.Arrivals)/a.p.window().Seconds()*m.MeanOutput
		}
	}
	enough := a.measured != nil && obs.Arrivals+obs.DecodeInflight >= a.p.MinSamples
	size := Estimate(obs, a.p)
	if enough {
		a.mix.record(now, obs, a.p.MinSamples)
	}
	floor := a.mix.floor(now, obs.ArrivalRate, a.p)
	raw := map[string]int{RolePrefill: max(size.Prefill, floor.Prefill), RoleDecode: max(size.Decode, floor.Decode)}
	var out []contract.ReplicaAdvice
	roles := []string{RolePrefill, RoleDecode, RoleEncode}
	for _, role := range roles {
		cur := a.current[role]
		if cur == 0 && a.stab[role] == nil {
			continue // a role the pool does not have
		}
		adv := contract.ReplicaAdvice{Pool: a.p.Pool, Role: role, Replicas: cur, Reason: ReasonNoData}
		switch {
		case role == RoleEncode:
			// the EPP sees no encode leg's time: the encode tier is reported as it is
			adv.Reason = ReasonSteady
		case !enough || (role == RolePrefill && obs.PrefillRate == 0) || (role == RoleDecode && obs.Step.PerSeq == 0):
			if s := a.stab[role]; s != nil && s.has {
				adv.Replicas = s.published
				adv.Reason = reasonFor(role, s.published, cur)
			}
		default:
			s := a.stab[role]
			if s == nil {
				s = newStabilizer(a.p.Band, a.p.dwell())
				a.stab[role] = s
			}
			adv.Replicas = max(s.update(now, max(raw[role], a.p.MinReplicas)), a.p.MinReplicas)
			adv.Reason = reasonFor(role, adv.Replicas, cur)
		}
		out = append(out, adv)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Role < out[j].Role })
	return out
}

// reasonFor compares the advice with the current size.
func reasonFor(role string, want, cur int) string {
	switch {
	case want > cur && role == RolePrefill:
		return ReasonPrefillBound
	case want > cur && role == RoleDecode:
		return ReasonDecodeBound
	case want < cur:
		return ReasonOverprovisioned
	}
	return ReasonSteady
}
