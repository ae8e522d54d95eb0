package simbench

import (
	"fmt"
	"time"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

	"github.com/pdgate/pdgate/cmd/sim/batching"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
	"github.com/pdgate/pdgate/cmd/sim/kvcache"
	"github.com/pdgate/pdgate/plugins/lib/engineattr"
)

// pod is one simulated model server: the simulator's batching scheduler and prefix cache on
// the shared virtual clock, plus what its /metrics endpoint would report at a scrape.
type pod struct {
	idx   int
	spec  PodSpec
	sched *batching.Scheduler
	cache *kvcache.PrefixCache
	cpu   *kvcache.PrefixCache // the CPU offload tier, nil without one
	sim   *Sim
	legs  map[*batching.Request]*leg

	// the EPP's view, refreshed on the scrape interval only
	meta    *fwkdl.EndpointMetadata
	metrics *fwkdl.Metrics // the last scrape's, replaced (never changed) by the next
	attrs   fwkdl.AttributeMap
	// ep is the pod as the EPP's endpoint candidate (meta, metrics, attrs)
	ep *fwkdl.ModelServer

	// cumulative counters read at scrapes (the simulator's histograms and counters)
	prefillSecSum float64
	prefillCount  int
	samples       []rateSample

	// routing outcome counters
	primary, prefillLegs int
	// assigned counts the requests in flight that were routed to this pod (as decode or
	// prefill pod), legs started or not
	assigned int
}

type rateSample struct {
	at                  time.Time
	generated, finished int
}

// legKind says what one engine request is for.
type legKind int

const (
	legLocal   legKind = iota // whole request on one pod (combined, or decode with local prefill)
	legPrefill                // P/D prefill leg: max_tokens 1, KV produced
	legDecode                 // P/D decode leg: KV transferred, decode only
)

// leg is one engine request belonging to a cluster request.
type leg struct {
	kind legKind
	req  *request
	br   batching.Request
}

func newPod(s *Sim, idx int, spec PodSpec, prof *costmodel.Profile, policy batching.KVFullPolicy) (*pod, error) {
	p := &pod{idx: idx, spec: spec, sim: s, legs: map[*batching.Request]*leg{},
		cache: kvcache.NewPrefixCache(prof.KVCapacityTokens / prof.BlockSize)}
	if prof.CPUOffload.CapacityTokens > 0 {
		p.cpu = kvcache.NewPrefixCache(prof.CPUOffload.CapacityTokens / prof.BlockSize)
	}
	sched, err := batching.New(batching.Config{Profile: prof, Clock: s.clock, MaxBatch: prof.MaxBatch,
		KVCapacityTokens: prof.KVCapacityTokens, ChunkedPrefillTokens: prof.ChunkedPrefillTokens,
		Policy: policy, StepExtra: s.cfg.Overheads.Step, Observer: p})
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", spec.Name, err)
	}
	p.sched = sched
	p.meta = spec.metadata()
	p.metrics = fwkdl.NewMetrics()
	p.metrics.KvCacheMaxTokenCapacity = prof.KVCapacityTokens
	p.metrics.CacheBlockSize = prof.BlockSize
	p.metrics.CacheNumBlocks = prof.KVCapacityTokens / prof.BlockSize
	p.ep = fwkdl.NewEndpoint(p.meta, p.metrics)
	p.attrs = p.ep.GetAttributes()
	return p, nil
}

// tiers is the pod's prefix cache: its GPU tier and, with an offload tier, its CPU one.
func (p *pod) tiers() kvcache.Tiered { return kvcache.Tiered{GPU: p.cache, CPU: p.cpu} }

// submit queues a leg on this pod's engine.
func (p *pod) submit(l *leg) error {
	p.legs[&l.br] = l
	if err := p.sched.Submit(&l.br); err != nil {
		delete(p.legs, &l.br)
		return err
	}
	return nil
}

// The Observer callbacks run with the engine's lock held: they only record and hand the
// follow-up to the event loop at the current virtual instant.

// PrefillDone feeds the prefill-time histogram the AIBrix policies read.
func (p *pod) PrefillDone(_ *batching.Request, _ int, d time.Duration) {
	p.prefillSecSum += d.Seconds()
	p.prefillCount++
}

// FirstToken: the prompt's KV exists on this pod (the simulator fills its prefix cache then).
func (p *pod) FirstToken(r *batching.Request) {
	if l := p.legs[r]; l != nil {
		p.sim.defer0(func() { p.sim.firstToken(p, l) })
	}
}

// Finished ends a leg.
func (p *pod) Finished(r *batching.Request) {
	if l := p.legs[r]; l != nil {
		delete(p.legs, r)
		p.sim.defer0(func() { p.sim.legDone(p, l) })
	}
}

// Preempted needs nothing: the engine recomputes and the leg continues.
func (p *pod) Preempted(*batching.Request) {}

// scrape refreshes the EPP's view as one metrics scrape of the simulator would: queue,
// running, KV use (core metrics) and the engine attribute pdgate's extractor fills
// (throughput over the newest sample ≥ 1 s old, drain rate over the last minute, mean
// prefill time), computed as cmd/sim/server does.
func (p *pod) scrape(now time.Time) {
	st := p.sched.Stats()
	// a new value, as the EPP's metrics extractors publish one: the request path's snapshots
	// share the metrics they saw (extproc/snapshot.go)
	m := p.metrics.Clone()
	defer func() { p.metrics = m; p.ep.UpdateMetrics(m) }()
	m.WaitingQueueSize, m.RunningRequestsSize = st.Waiting, st.Running
	m.KVCacheUsagePercent = float64(st.KVUsedTokens) / float64(st.KVCapacityTokens)
	m.UpdateTime = now

	cur := rateSample{at: now, generated: st.GeneratedTokens, finished: st.Finished}
	for len(p.samples) > 1 && now.Sub(p.samples[1].at) >= time.Minute {
		p.samples = p.samples[1:]
	}
	if len(p.samples) == 0 {
		p.samples = append(p.samples, cur)
	}
	thr := p.samples[0]
	for i := len(p.samples) - 1; i >= 0; i-- {
		if now.Sub(p.samples[i].at) >= time.Second {
			thr = p.samples[i]
			break
		}
	}
	em := &engineattr.Metrics{Engine: p.spec.Engine, UpdateTime: now,
		Running: float64(st.Running), HasRunning: true, Waiting: float64(st.Waiting), HasWaiting: true,
		KVUsage: m.KVCacheUsagePercent, HasKVUsage: true, HasGenThroughput: true}
	if dt := now.Sub(thr.at).Seconds(); dt > 0 {
		em.GenThroughput = float64(cur.generated-thr.generated) / dt
	}
	if p.prefillCount > 0 {
		em.PrefillTimeMean, em.HasPrefillTimeMean = p.prefillSecSum/float64(p.prefillCount), true
	}
	old := p.samples[0]
	if dt := now.Sub(old.at).Seconds(); dt > 0 {
		em.DrainRate1m, em.HasDrainRate1m = max(float64(cur.finished-old.finished)/dt, 0.01), true
	}
	if now.Sub(p.samples[len(p.samples)-1].at) >= time.Second {
		p.samples = append(p.samples, cur)
	}
	p.attrs.Put(engineattr.AttributeKey, em)
}
