// Package programawarefairness is llm-d's program-aware-fairness: a flow-control fairness
// policy for agentic and multi-call programs. Each fairness ID (header
// x-gateway-inference-fairness-id, llm-d's x-llm-d-inference-fairness-id alias, else
// "default-flow") is a program; within a priority band the next request comes from the program
// with the best blend of least attained service (tokens served, decayed with a half-life) and
// longest head-of-queue wait (LAS). It also runs as a PreRequest plugin (dispatch counts and
// queue waits) and a ResponseBody plugin (attained service from the response's usage:
// prompt + 2 × completion tokens). Reference it from a priority band's fairnessPolicyRef with
// the flowControl feature gate on.
package programawarefairness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkfc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/flowcontrol"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Type is the plugin type name.
const Type = "program-aware-fairness"

// LLMDFairnessHeader is llm-d's name of the fairness-ID header (GIE's is metadata.FlowFairnessIDKey).
const LLMDFairnessHeader = "x-llm-d-inference-fairness-id"

// Parameters are llm-d's parameters.
type Parameters struct {
	Strategy             string   `json:"strategy"`
	LASWeightService     *float64 `json:"lasWeightService"`
	LASWeightHeadWait    *float64 `json:"lasWeightHeadWait"`
	LASHalfLifeSeconds   *float64 `json:"lasHalfLifeSeconds"`
	EvictionTTLSeconds   *float64 `json:"evictionTtlSeconds"`
	EvictionSweepSeconds *float64 `json:"evictionSweepSeconds"`
}

// Config is the validated configuration.
type Config struct {
	WeightService, WeightHeadWait float64
	HalfLife, EvictionTTL, Sweep  time.Duration
}

// DefaultConfig is llm-d's defaults.
func DefaultConfig() Config {
	return Config{WeightService: 0.8, WeightHeadWait: 0.2, HalfLife: 60 * time.Second, EvictionTTL: time.Hour, Sweep: 5 * time.Minute}
}

// ParseParameters decodes strictly, defaults and validates.
func ParseParameters(name string, raw json.RawMessage) (Config, error) {
	c := DefaultConfig()
	var p Parameters
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return Config{}, err
	}
	if p.Strategy != "" && p.Strategy != "las" {
		return Config{}, fmt.Errorf("%s %q: parameter strategy=%q: only \"las\" is supported", Type, name, p.Strategy)
	}
	nonNeg := func(field string, v *float64, dst *float64) error {
		if v == nil {
			return nil
		}
		if *v < 0 || math.IsNaN(*v) {
			return fmt.Errorf("%s %q: parameter %s=%v: must be >= 0", Type, name, field, *v)
		}
		*dst = *v
		return nil
	}
	secs := func(d time.Duration) float64 { return d.Seconds() }
	hl, ttl, sweep := secs(c.HalfLife), secs(c.EvictionTTL), secs(c.Sweep)
	for _, f := range []struct {
		field string
		v     *float64
		dst   *float64
	}{{"lasWeightService", p.LASWeightService, &c.WeightService}, {"lasWeightHeadWait", p.LASWeightHeadWait, &c.WeightHeadWait},
		{"lasHalfLifeSeconds", p.LASHalfLifeSeconds, &hl}, {"evictionTtlSeconds", p.EvictionTTLSeconds, &ttl}} {
		if err := nonNeg(f.field, f.v, f.dst); err != nil {
			return Config{}, err
		}
	}
	if p.EvictionSweepSeconds != nil {
		if *p.EvictionSweepSeconds <= 0 {
			return Config{}, fmt.Errorf("%s %q: parameter evictionSweepSeconds=%v: must be > 0", Type, name, *p.EvictionSweepSeconds)
		}
		sweep = *p.EvictionSweepSeconds
	}
	c.HalfLife = time.Duration(hl * float64(time.Second))
	c.EvictionTTL = time.Duration(ttl * float64(time.Second))
	c.Sweep = time.Duration(sweep * float64(time.Second))
	return c, nil
}

// fairMetrics are the policy's gauges (llm-d's names); New creates them unregistered and
// Factory registers them on the EPP's registerer.
type fairMetrics struct {
	jain     prometheus.Gauge
	avgWait  *prometheus.GaugeVec
	attained *prometheus.GaugeVec
}

func newFairMetrics() fairMetrics {
	return fairMetrics{
		jain: prometheus.NewGauge(prometheus.GaugeOpts{Name: "llm_d_epp_program_aware_jains_fairness_index",
			Help: "Jain's fairness index over the programs' mean queue waits (1.0 = perfectly fair), recomputed on every pick."}),
		avgWait: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "llm_d_epp_program_aware_avg_wait_time_milliseconds",
			Help: "Mean flow-control queue wait of a program's dispatched requests."}, []string{"program_id"}),
		attained: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "llm_d_epp_program_aware_attained_service_tokens",
			Help: "A program's decayed attained service (prompt + 2 x completion tokens)."}, []string{"program_id"}),
	}
}

// register registers the gauges on reg, taking the already registered ones when another
// instance registered them first.
func (m *fairMetrics) register(reg prometheus.Registerer) error {
	return errors.Join(pluginkit.RegisterInto(reg, &m.jain), pluginkit.RegisterInto(reg, &m.avgWait),
		pluginkit.RegisterInto(reg, &m.attained))
}

type program struct {
	service        float64
	updated        time.Time
	inFlight       int
	dispatched     int
	meanWaitMs     float64
	lastCompletion time.Time
	lastDispatch   time.Time
}

// Policy is program-aware-fairness. Program state is plugin-wide (not per band), as in llm-d.
type Policy struct {
	tn  fwkplugin.TypedName
	cfg Config
	now func() time.Time
	m   fairMetrics
	// sweepCtx, when set, is the handle's context the idle-program sweep runs on; it starts at
	// the first Pick, so a factory call alone (validation, a failed reload) starts nothing.
	sweepCtx  context.Context
	sweepOnce sync.Once

	mu       sync.Mutex
	programs map[string]*program
	enqueued map[string]time.Time // request ID → enqueue time of a picked head, until PreRequest
}

var (
	_ fwkfc.FairnessPolicy = (*Policy)(nil)
	_ fwkrc.PreRequest     = (*Policy)(nil)
	_ fwkrc.ResponseBody   = (*Policy)(nil)
)

// Factory builds the policy; with a handle and evictionTtlSeconds > 0 it sweeps idle programs,
// from the first pick until the handle's context ends.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	c, err := ParseParameters(name, raw)
	if err != nil {
		return nil, err
	}
	p := New(name, c, time.Now)
	if err := p.m.register(pluginkit.Registerer(handle)); err != nil {
		return nil, pluginkit.Errorf(Type, name, "%w", err)
	}
	if handle != nil && handle.Context() != nil && c.EvictionTTL > 0 {
		p.sweepCtx = handle.Context()
	}
	return p, nil
}

// New builds the policy with an injected clock.
func New(name string, c Config, now func() time.Time) *Policy {
	if name == "" {
		name = Type
	}
	return &Policy{tn: fwkplugin.TypedName{Type: Type, Name: name}, cfg: c, now: now, m: newFairMetrics(),
		programs: map[string]*program{}, enqueued: map[string]time.Time{}}
}

// TypedName implements fwkplugin.Plugin.
func (p *Policy) TypedName() fwkplugin.TypedName { return p.tn }

// NewState returns nil: state is plugin-wide.
func (p *Policy) NewState(context.Context) any { return nil }

// decayLocked brings a program's service to now.
func (p *Policy) decayLocked(pr *program, now time.Time) {
	if p.cfg.HalfLife > 0 && !pr.updated.IsZero() {
		if dt := now.Sub(pr.updated); dt > 0 {
			pr.service *= math.Exp2(-dt.Seconds() / p.cfg.HalfLife.Seconds())
		}
	}
	pr.updated = now
}

func (p *Policy) programLocked(id string) *program {
	pr := p.programs[id]
	if pr == nil {
		pr = &program{}
		p.programs[id] = pr
	}
	return pr
}

// Pick implements fwkfc.FairnessPolicy (LAS): over the band's non-empty queues,
// score = wS × (1 − normalised attained service) + wW × normalised head wait; highest wins,
// ties to the smaller program ID (llm-d leaves ties to map order).
func (p *Policy) Pick(_ context.Context, band fwkfc.PriorityBandAccessor) (fwkfc.FlowQueueAccessor, error) {
	if p.sweepCtx != nil {
		p.sweepOnce.Do(func() { go p.sweepLoop(p.sweepCtx) })
	}
	if band == nil {
		return nil, nil
	}
	type cand struct {
		q    fwkfc.FlowQueueAccessor
		id   string
		s, w float64
		head fwkfc.QueueItemAccessor
	}
	var cands []cand
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	band.IterateQueues(func(q fwkfc.FlowQueueAccessor) bool {
		if q == nil || q.Len() == 0 {
			return true
		}
		head := q.PeekHead()
		if head == nil {
			return true
		}
		id := q.FlowKey().ID
		pr := p.programLocked(id)
		p.decayLocked(pr, now)
		cands = append(cands, cand{q: q, id: id, s: pr.service, w: float64(now.Sub(head.EnqueueTime()).Milliseconds()), head: head})
		return true
	})
	if len(cands) == 0 {
		return nil, nil
	}
	minS, maxS, minW, maxW := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, c := range cands {
		minS, maxS = math.Min(minS, c.s), math.Max(maxS, c.s)
		minW, maxW = math.Min(minW, c.w), math.Max(maxW, c.w)
	}
	norm := func(v, lo, hi float64) float64 {
		if hi == lo {
			return 0.5
		}
		return (v - lo) / (hi - lo)
	}
	best, bestScore := -1, math.Inf(-1)
	for i, c := range cands {
		score := p.cfg.WeightService*(1-norm(c.s, minS, maxS)) + p.cfg.WeightHeadWait*norm(c.w, minW, maxW)
		if score > bestScore || (score == bestScore && c.id < cands[best].id) {
			best, bestScore = i, score
		}
	}
	win := cands[best]
	if req := win.head.OriginalRequest(); req != nil && req.ID() != "" {
		if len(p.enqueued) > 100000 { // bound: requests picked but never dispatched
			clear(p.enqueued)
		}
		p.enqueued[req.ID()] = win.head.EnqueueTime()
	}
	p.m.jain.Set(p.jainLocked())
	return win.q, nil
}

// jainLocked is Jain's index over the programs' mean waits, (Σx)²/(n·Σx²), 1.0 for n ≤ 1.
func (p *Policy) jainLocked() float64 {
	var sum, sq float64
	n := 0
	for _, pr := range p.programs {
		if pr.dispatched == 0 {
			continue
		}
		n++
		sum += pr.meanWaitMs
		sq += pr.meanWaitMs * pr.meanWaitMs
	}
	if n <= 1 || sq == 0 {
		return 1.0
	}
	return sum * sum / (float64(n) * sq)
}

// ProgramID is a request's program: the fairness-ID header (GIE's or llm-d's name), else
// default-flow.
func ProgramID(req *fwksched.LLMRequest) string {
	if req == nil {
		return metadata.DefaultFairnessID
	}
	for k, v := range req.Headers {
		if (strings.EqualFold(k, metadata.FlowFairnessIDKey) || strings.EqualFold(k, LLMDFairnessHeader)) && v != "" {
			return v
		}
	}
	return metadata.DefaultFairnessID
}

// PreRequest counts a dispatch and the request's queue wait.
func (p *Policy) PreRequest(_ context.Context, req *fwksched.LLMRequest, _ *fwksched.SchedulingResult) {
	if req == nil {
		return
	}
	id, now := ProgramID(req), p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.programLocked(id)
	pr.inFlight++
	pr.dispatched++
	pr.lastDispatch = now
	if t, ok := p.enqueued[req.RequestId]; ok {
		delete(p.enqueued, req.RequestId)
		wait := float64(now.Sub(t).Milliseconds())
		pr.meanWaitMs += (wait - pr.meanWaitMs) / float64(pr.dispatched)
	} else {
		pr.meanWaitMs -= pr.meanWaitMs / float64(pr.dispatched) // no queue wait (gate off or direct dispatch): 0
	}
	p.m.avgWait.WithLabelValues(id).Set(pr.meanWaitMs)
}

// ResponseBody adds the response's cost to the program's attained service at end of stream.
func (p *Policy) ResponseBody(_ context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, _ *fwkdl.EndpointMetadata) {
	if req == nil || resp == nil || !resp.EndOfStream {
		return
	}
	id, now := ProgramID(req), p.now()
	cost := float64(resp.Usage.PromptTokens) + 2*float64(resp.Usage.CompletionTokens)
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.programLocked(id)
	p.decayLocked(pr, now)
	pr.service += cost
	if pr.inFlight > 0 {
		pr.inFlight--
	}
	pr.lastCompletion = now
	p.m.attained.WithLabelValues(id).Set(pr.service)
}

// Attained returns a program's decayed attained service (tests, debugging).
func (p *Policy) Attained(id string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	pr := p.programs[id]
	if pr == nil {
		return 0
	}
	p.decayLocked(pr, p.now())
	return pr.service
}

func (p *Policy) sweepLoop(ctx context.Context) { pluginkit.Every(ctx, p.cfg.Sweep, p.Sweep) }

// Sweep forgets programs with nothing in flight and no completion or dispatch within the
// eviction TTL, with their metric series.
func (p *Policy) Sweep() {
	if p.cfg.EvictionTTL <= 0 {
		return
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, pr := range p.programs {
		last := pr.lastCompletion
		if pr.lastDispatch.After(last) {
			last = pr.lastDispatch
		}
		if pr.inFlight == 0 && now.Sub(last) > p.cfg.EvictionTTL {
			delete(p.programs, id)
			p.m.avgWait.DeleteLabelValues(id)
			p.m.attained.DeleteLabelValues(id)
		}
	}
}
