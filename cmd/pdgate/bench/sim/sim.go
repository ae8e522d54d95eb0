// Package simbench is `pdgate bench sim`: GIE's real scheduler with pdgate's plugins, driven
// in virtual time against simulated pods that use the simulator's own cost model, batching
// scheduler and prefix cache (cmd/sim), so routing policies can be compared at fleet scale and
// the EPP's own CPU cost per request is measured on the side.
package simbench

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"time"

	errcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/error"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
	"github.com/pdgate/pdgate/plugins/framework/contract"

	"github.com/pdgate/pdgate/cmd/sim/batching"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
	"github.com/pdgate/pdgate/cmd/sim/kvcache"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Overheads are the data path's costs outside the engines, in virtual time.
type Overheads struct {
	// Route is the gateway and EPP time before a request leaves the gateway (ext_proc round
	// trips, body handling, the scheduling decision).
	Route time.Duration
	// Hop is one HTTP traversal between two processes (gateway → sidecar, sidecar → engine,
	// a response chunk back).
	Hop time.Duration
	// Step is added to every engine step: the real simulator's step ends on a wall-clock
	// timer, which fires late by the host's timer and scheduling latency.
	Step time.Duration
}

// Config is one simulation run.
type Config struct {
	Profile   *costmodel.Profile
	Pods      []PodSpec
	EPPConfig string // EndpointPickerConfig file; "" = GIE's default config
	Model     string
	Source    Source
	// Scrape is the EPP's metrics refresh interval (GIE's default: 50 ms).
	Scrape    time.Duration
	Overheads Overheads
	KVPolicy  batching.KVFullPolicy
	// MaxInflight holds arrivals back while that many requests are in flight, as the lab's
	// load generator does (its --concurrency); 0 = no bound (open loop).
	MaxInflight int
	// Placement, when set, places the pods on hosts, racks and zones and scales each KV
	// transfer by the distance between its two pods (topology.go).
	Placement *Placement
	// OnArrival, when set, is called with the number of requests that have arrived so far
	// (progress reports of long runs).
	OnArrival func(arrived int)
	// Routers is the number of independent EPPs (each assembled from EPPConfig, with its own
	// plugin state) the requests are spread over in turn: several gateways or EPP replicas
	// that share no routing state. 0 or 1 = one EPP.
	Routers int
	// Seed seeds the EPPs' random sources (pickers' tie-breaks, random pairings; router i gets
	// Seed+i): a run is reproducible for a given Config and Seed.
	Seed int64
	// Actuator, when set, scales the fleet's roles on the advice of the EPP's replica
	// advisor (actuator.go).
	Actuator *ActuatorConfig
	// PrefillRelease reports the end of each prefill leg to the EPP's prefill releasers and
	// its admission's dispatch ledger, as the sidecar's callback does for an EPP run with
	// --prefill-release-address.
	PrefillRelease bool
	// PrefillTimeout is the sidecar's --prefill-timeout under its default failure policy,
	// fallback-local: a prefill leg not back within it is cancelled on the prefill pod (the
	// sidecar's deadline aborts the engine request) and the decode pod prefills the prompt
	// itself. 0: no deadline, the prefill leg is waited for however long it queues.
	PrefillTimeout time.Duration
}

// Sim is one virtual-time cluster run.
type Sim struct {
	cfg    Config
	prof   *costmodel.Profile
	clock  *batching.FakeClock
	start  time.Time
	pods   []*pod
	byName map[string]*pod
	byAddr map[string]*pod
	epps   []*epp // the routers (Config.Routers)
	ctx    context.Context

	srcDone  bool
	inflight int
	held     []Arrival // arrivals waiting for MaxInflight
	nextID   int
	res      *Result
	act      *actuator // nil: a fixed fleet
}

// request is one client request in flight.
type request struct {
	id       int
	a        Arrival
	llm      *fwksched.LLMRequest
	hashes   []uint64
	arrival  time.Time
	firstAt  time.Time
	decode   *pod
	prefill  *pod
	epp      *epp // the router that scheduled it
	finished bool
	// assigned, prefillHeld: the request counts on its decode pod's and its prefill pod's
	// assigned until it ends and until its prefill leg ends (a draining pod leaves once none do)
	assigned, prefillHeld bool
	// engine-side marks for the leg breakdown (what the simulators' own histograms measure)
	legSubmit time.Time
	// fellBack: the prefill leg missed Config.PrefillTimeout and the decode pod prefills
	fellBack bool
}

// New builds the pods and the EPP for cfg.
func New(cfg Config) (*Sim, error) {
	if cfg.Profile == nil || cfg.Source == nil || len(cfg.Pods) == 0 {
		return nil, errors.New("sim: Profile, Source and Pods are required")
	}
	if cfg.Scrape <= 0 {
		cfg.Scrape = 50 * time.Millisecond
	}
	if cfg.Model == "" {
		cfg.Model = cfg.Profile.Model
	}
	prof := *cfg.Profile
	s := &Sim{cfg: cfg, prof: &prof, clock: batching.NewFakeClock(), byName: map[string]*pod{}, byAddr: map[string]*pod{},
		ctx: context.Background()}
	s.start = s.clock.Now()
	for i, spec := range cfg.Pods {
		p, err := newPod(s, i, spec, s.prof, cfg.KVPolicy)
		if err != nil {
			return nil, err
		}
		s.pods = append(s.pods, p)
		s.byName[spec.Name] = p
		s.byAddr[spec.Addr()] = p
	}
	for i := 0; i < max(cfg.Routers, 1); i++ {
		e, err := loadEPP(cfg.EPPConfig, s.pods, s.clock.Now, cfg.Seed+int64(i))
		if err != nil {
			for _, o := range s.epps {
				o.stop()
			}
			return nil, err
		}
		if cfg.PrefillRelease {
			e.core.Dispatches.TrackReturns()
		}
		s.epps = append(s.epps, e)
	}
	s.res = newResult(len(s.pods))
	if cfg.Actuator != nil {
		act, err := newActuator(s, *cfg.Actuator)
		if err != nil {
			for _, e := range s.epps {
				e.stop()
			}
			return nil, err
		}
		s.act = act
	}
	return s, nil
}

// Run drives the whole workload to completion and returns the results.
func (s *Sim) Run() (*Result, error) {
	// EPP CPU is read per thread: keep the loop on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer func() {
		for _, e := range s.epps {
			e.stop()
		}
	}()
	wall := time.Now()
	for _, p := range s.pods {
		p.scrape(s.clock.Now())
	}
	s.scheduleNext()
	s.clock.AfterFunc(s.cfg.Scrape, s.scrapeAll)
	if s.act != nil {
		s.act.start()
	}
	for {
		d, ok := s.clock.NextIn()
		if !ok {
			break
		}
		s.clock.Advance(max(d, 0))
	}
	if s.inflight != 0 {
		return nil, fmt.Errorf("sim: %d requests still in flight when no event was left", s.inflight)
	}
	s.res.finish(s, time.Since(wall))
	return s.res, nil
}

func (s *Sim) now() time.Time { return s.clock.Now() }

// defer0 runs f at the current virtual instant, after the running callback returns (engine
// callbacks hold the engine's lock).
func (s *Sim) defer0(f func()) { s.clock.AfterFunc(0, f) }

func (s *Sim) scheduleNext() {
	a, ok := s.cfg.Source.Next()
	if !ok {
		s.srcDone = true
		return
	}
	s.clock.AfterFunc(a.At-s.now().Sub(s.start), func() {
		if s.cfg.MaxInflight > 0 && s.inflight >= s.cfg.MaxInflight {
			s.held = append(s.held, a)
		} else {
			s.arrive(a)
		}
		s.scheduleNext()
	})
}

func (s *Sim) scrapeAll() {
	now := s.now()
	for _, p := range s.pods {
		p.scrape(now)
	}
	if !s.srcDone || s.inflight > 0 || len(s.held) > 0 {
		s.clock.AfterFunc(s.cfg.Scrape, s.scrapeAll)
	}
}

// llmRequest is arrival a as the EPP's director sees it once the body is parsed.
func (s *Sim) llmRequest(id string, a Arrival) *fwksched.LLMRequest {
	headers := map[string]string{"x-request-id": id}
	for k, v := range a.Headers {
		headers[k] = v
	}
	return &fwksched.LLMRequest{RequestId: id, TargetModel: s.cfg.Model, Headers: headers, Body: a.Body,
		RequestSizeBytes: a.Bytes}
}

func (s *Sim) arrive(a Arrival) {
	s.nextID++
	id := "req-" + strconv.Itoa(s.nextID)
	r := &request{id: s.nextID, a: a, arrival: s.now(), llm: s.llmRequest(id, a)}
	s.inflight++
	s.res.sent++
	s.res.sentByKind[a.Kind]++
	if s.cfg.OnArrival != nil {
		s.cfg.OnArrival(s.res.sent)
	}
	r.epp = s.epps[(s.nextID-1)%len(s.epps)]
	dec, err := r.epp.decide(s.ctx, r.llm)
	if err != nil {
		s.answered(r, err)
		return
	}
	res := dec.Result
	pr := res.ProfileResults[res.PrimaryProfileName]
	if pr == nil || len(pr.TargetEndpoints) == 0 {
		s.fail(r, "epp: no target")
		return
	}
	r.decode = s.byName[pr.TargetEndpoints[0].GetMetadata().NamespacedName.Name]
	if r.decode == nil {
		s.fail(r, "epp: unknown target")
		return
	}
	if hp := r.llm.Headers[protocol.HeaderPrefillerHostPort]; hp != "" {
		r.prefill = s.byAddr[hp]
		if r.prefill == nil {
			s.fail(r, "epp: prefill target not in the pool")
			return
		}
	}
	s.checkHandoff(r) // compat.go: marks a pair that could not exchange KV
	// the sim's prompt and decoded body are no longer needed by the EPP after scheduling;
	// keep only what the engines need
	r.hashes = kvcache.BlockHashes(a.Tokens, s.prof.BlockSize)
	r.decode.primary++
	r.assigned = true
	r.decode.assigned++
	if r.prefill != nil {
		r.prefillHeld = true
		r.prefill.assigned++
	}
	s.clock.AfterFunc(s.cfg.Overheads.Route+s.cfg.Overheads.Hop, func() { s.dispatch(r) })
}

// answered ends a request the EPP answered itself (an admission refusal, a plugin's early
// answer, a scheduling error): counted by status, and among the failures by status and cause.
func (s *Sim) answered(r *request, err error) {
	status := extproc.StatusOf(err)
	why := "stream error"
	if a, ok := contract.AnswerOf(err); ok {
		why = string(a.Cause)
	} else if e := (errcommon.Error{}); errors.As(err, &e) {
		why = e.Code
	}
	s.res.answers[strconv.Itoa(status)]++
	s.res.failed["epp: "+strconv.Itoa(status)+" "+why]++
	s.end(r)
}

// dispatch: the request reached the decode pod's sidecar (or a combined pod's).
func (s *Sim) dispatch(r *request) {
	prompt := len(r.a.Tokens)
	if prompt >= s.prof.MaxModelLen {
		s.fail(r, "prompt too long")
		return
	}
	if r.prefill != nil {
		r.prefill.prefillLegs++
		l := &leg{kind: legPrefill, req: r,
			br: batching.Request{ID: r.llm.RequestId + "-p", PromptTokens: prompt, OutputTokens: 1}}
		if d := s.cfg.PrefillTimeout; d > 0 {
			s.clock.AfterFunc(d, func() { s.prefillDeadline(l) })
		}
		s.prefillOn(r.prefill, l)
		return
	}
	s.prefillOn(r.decode, &leg{kind: legLocal, req: r,
		br: batching.Request{ID: r.llm.RequestId, PromptTokens: prompt, OutputTokens: r.a.Output}})
}

// prefillOn submits a leg that prefills l's prompt on p, one hop later: its cached tokens are
// p's prefix hit (counted in the run's prefill work), and the tokens only p's CPU tier holds
// are loaded first.
func (s *Sim) prefillOn(p *pod, l *leg) {
	cached, loaded := s.cachedOn(p, l.req)
	l.br.CachedTokens = cached
	s.res.prefix(l.br.PromptTokens, cached, loaded, s.fleetBestCached(l.req))
	s.clock.AfterFunc(s.cfg.Overheads.Hop+s.prof.CPULoadTime(loaded), func() { s.submit(p, l) })
}

// fleetBestCached is the longest prefix hit any pod of the fleet would give r now, either
// tier. It only peeks: observing the caches must not change what they evict.
func (s *Sim) fleetBestCached(r *request) int {
	best := 0
	for _, p := range s.pods {
		best = max(best, p.tiers().Peek(r.hashes))
	}
	return s.hitTokens(best, r)
}

// cachedOn is the simulator's prefix-cache hit on p, whole blocks, the last prompt token
// always computed, and how many of those tokens only the CPU tier holds: the engine loads
// them before it schedules the request (vLLM's offloading connector holds the request until
// its KV has arrived, while the batch runs on), so they cost time in this request's TTFT
// alone and no compute.
func (s *Sim) cachedOn(p *pod, r *request) (cached, loaded int) {
	onGPU, total := p.tiers().Match(r.hashes)
	cached = s.hitTokens(total, r)
	return cached, cached - min(s.hitTokens(onGPU, r), cached)
}

func (s *Sim) hitTokens(blocks int, r *request) int {
	return max(min(blocks*s.prof.BlockSize, len(r.a.Tokens)-1), 0)
}

func (s *Sim) submit(p *pod, l *leg) {
	if l.kind == legPrefill && l.req.fellBack {
		s.fallbackLocal(l.req) // the deadline passed before the leg reached the engine
		return
	}
	l.req.legSubmit = s.now()
	if err := p.submit(l); err != nil {
		s.fail(l.req, "engine: "+err.Error())
	}
}

// firstToken: the leg's prompt KV exists on p.
func (s *Sim) firstToken(p *pod, l *leg) {
	s.cacheInsert(p, l.req)
	if l.kind == legPrefill {
		return
	}
	r := l.req
	r.firstAt = s.now()
	s.res.legs.add(l.kind, r.firstAt.Sub(r.legSubmit))
	headers := map[string]string{}
	switch {
	case r.fellBack:
		headers[protocol.HeaderPrefillOutcome] = protocol.PrefillFallbackLocal
	case r.prefill != nil:
		headers[protocol.HeaderPrefillOutcome] = protocol.PrefillOK
	}
	r.epp.responseHeader(s.ctx, r.llm, headers, r.decode.meta)
}

// legDone ends a leg: a prefill leg hands the KV to the decode pod, a serving leg ends the
// request.
func (s *Sim) legDone(_ *pod, l *leg) {
	r := l.req
	if err := l.br.Progress().Err; err != nil {
		if l.kind == legPrefill && r.fellBack && errors.Is(err, batching.ErrCancelled) {
			s.fallbackLocal(r)
			return
		}
		s.fail(r, "engine: "+err.Error())
		return
	}
	if l.kind == legPrefill {
		s.res.legs.add(legPrefill, s.now().Sub(r.legSubmit))
		r.releasePrefill()
		if s.cfg.PrefillRelease {
			r.epp.core.PrefillReturned(r.llm.RequestId)
		}
		// prefill response → sidecar, decode request → engine, the engine's pull from the
		// prefill server (a round trip), then the KV transfer itself (a timed sleep in the
		// real simulator, late like a step)
		prompt := len(r.a.Tokens)
		d := 4*s.cfg.Overheads.Hop + s.transferTime(r.prefill, r.decode, prompt) + s.cfg.Overheads.Step
		dl := &leg{kind: legDecode, req: r}
		dl.br = batching.Request{ID: r.llm.RequestId, PromptTokens: prompt, CachedTokens: prompt, OutputTokens: r.a.Output}
		s.clock.AfterFunc(d, func() { s.submit(r.decode, dl) })
		return
	}
	s.complete(r)
}

// complete records a served request; tokens reach the client through the sidecar and the
// gateway (two hops), which shifts first and last token alike.
func (s *Sim) complete(r *request) {
	back := 2 * s.cfg.Overheads.Hop
	now := s.now()
	ttft := r.firstAt.Sub(r.arrival) + back
	e2e := now.Sub(r.arrival) + back
	var tpot time.Duration
	if r.a.Output > 1 {
		tpot = now.Sub(r.firstAt) / time.Duration(r.a.Output-1)
	}
	s.res.record(r, ttft, tpot, e2e)
	r.epp.responseEnd(s.ctx, r.llm, len(r.a.Tokens), r.a.Output, r.decode.meta)
	s.end(r)
}

// releasePrefill ends the request's hold on its prefill pod (once).
func (r *request) releasePrefill() {
	if r.prefillHeld {
		r.prefillHeld = false
		r.prefill.assigned--
	}
}

func (s *Sim) fail(r *request, why string) {
	s.res.failed[why]++
	if r.decode != nil {
		r.epp.responseEnd(s.ctx, r.llm, 0, 0, r.decode.meta)
	}
	s.end(r)
}

func (s *Sim) end(r *request) {
	if r.finished {
		panic(fmt.Sprintf("sim: request %d ended twice", r.id))
	}
	r.finished = true
	if r.assigned {
		r.decode.assigned--
	}
	r.releasePrefill()
	s.inflight--
	s.res.ended++
	if len(s.held) > 0 {
		a := s.held[0]
		s.held = s.held[1:]
		s.defer0(func() { s.arrive(a) })
	}
}
