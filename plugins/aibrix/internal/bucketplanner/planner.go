// Package bucketplanner is AIBrix's adaptive bucket serving (BucketServe-style): it learns the
// prompt-length distribution per model (log-spaced histogram with a 30 s half-life), and every
// 5 s at most recomputes a plan that splits prompt-length ranges served by several rolesets
// into bands, so each roleset receives traffic in proportion to its prefill replicas
// (throughput mode: token mass; rps mode: request count). The plan is advisory: the caller
// narrows to the banded roleset only when it still has prefill and decode candidates.
package bucketplanner

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"
)

// Constants from AIBrix.
const (
	BinsPerOctave   = 8
	NumBins         = 168 // up to 2^21 tokens; longer → last bin
	HalfLife        = 30 * time.Second
	RefreshInterval = 5 * time.Second
	MinSplitShare   = 0.05
	MaxBands        = 16
	maxPlansCached  = 8
	openMax         = math.MaxInt32 - 1 // an open upper bound, shortened by one to avoid overflow
)

// Group is one eligible roleset: its declared range (max 0 = unlimited) and prefill replicas.
type Group struct {
	Name     string
	Min, Max int
	Replicas int
}

// Band maps an inclusive prompt-length range to a roleset.
type Band struct {
	Min, Max int
	Roleset  string
}

// Plan is a set of bands sorted by Min.
type Plan struct {
	Bands    []Band
	Computed time.Time
}

// Lookup returns the band containing n.
func (p *Plan) Lookup(n int) (Band, bool) {
	if p == nil {
		return Band{}, false
	}
	i := sort.Search(len(p.Bands), func(i int) bool { return p.Bands[i].Max >= n })
	if i < len(p.Bands) && p.Bands[i].Min <= n {
		return p.Bands[i], true
	}
	return Band{}, false
}

// Bin returns the histogram bin of a prompt length: floor(log2(n)·8), n ≤ 1 → 0.
func Bin(n int) int {
	if n <= 1 {
		return 0
	}
	b := int(math.Floor(math.Log2(float64(n)) * BinsPerOctave))
	return min(b, NumBins-1)
}

// BinCentre is round(2^((b+0.5)/8)).
func BinCentre(b int) int { return int(math.Round(math.Pow(2, (float64(b)+0.5)/BinsPerOctave))) }

type histogram struct {
	weights, masses [NumBins]float64
	last            time.Time
}

func (h *histogram) decay(now time.Time) {
	if !h.last.IsZero() && now.After(h.last) {
		f := math.Pow(0.5, now.Sub(h.last).Seconds()/HalfLife.Seconds())
		for i := range h.weights {
			h.weights[i] *= f
			h.masses[i] *= f
		}
	}
	if now.After(h.last) {
		h.last = now
	}
}

type cachedPlan struct {
	plan *Plan
	key  string
}

type model struct {
	hist  histogram
	plans []cachedPlan // oldest first
}

// Planner keeps one histogram and plan cache per model.
type Planner struct {
	mu     sync.Mutex
	models map[string]*model
	m      *Metrics
}

// New returns a planner; metrics may be nil.
func New(m *Metrics) *Planner { return &Planner{models: map[string]*model{}, m: m} }

func (p *Planner) model(name string) *model {
	md := p.models[name]
	if md == nil {
		md = &model{}
		p.models[name] = md
	}
	return md
}

// Observe adds one request of prompt length n.
func (p *Planner) Observe(modelName string, n int, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := &p.model(modelName).hist
	h.decay(now)
	b := Bin(n)
	h.weights[b]++
	h.masses[b] += float64(n)
}

// Fingerprint identifies a group set: sorted "name=min-maxxreplicas".
func Fingerprint(mode string, groups []Group) string {
	parts := make([]string, len(groups))
	for i, g := range groups {
		parts[i] = fmt.Sprintf("%s=%d-%dx%d", g.Name, g.Min, g.Max, g.Replicas)
	}
	sort.Strings(parts)
	return mode + "|" + strings.Join(parts, ",")
}

// Band returns the band for n under the current plan for (mode, groups), recomputing the plan
// when it is older than RefreshInterval.
func (p *Planner) Band(modelName, mode string, groups []Group, n int, now time.Time) (Band, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	md := p.model(modelName)
	key := Fingerprint(mode, groups)
	idx := -1
	for i, c := range md.plans {
		if c.key == key {
			idx = i
		}
	}
	if idx < 0 || now.Sub(md.plans[idx].plan.Computed) >= RefreshInterval {
		md.hist.decay(now)
		vec := md.hist.masses
		if mode == "rps" {
			vec = md.hist.weights
		}
		plan := &Plan{Bands: Compute(groups, vec[:]), Computed: now}
		if idx >= 0 {
			md.plans = append(md.plans[:idx], md.plans[idx+1:]...)
		}
		md.plans = append(md.plans, cachedPlan{plan: plan, key: key})
		if len(md.plans) > maxPlansCached {
			md.plans = md.plans[len(md.plans)-maxPlansCached:]
		}
		idx = len(md.plans) - 1
		p.publish()
	}
	return md.plans[idx].plan.Lookup(n)
}

// publish sets the band-max gauge per roleset over all cached plans and deletes rolesets that
// left every plan.
func (p *Planner) publish() {
	if p.m == nil {
		return
	}
	maxes := map[string]int{}
	for _, md := range p.models {
		for _, c := range md.plans {
			for _, b := range c.plan.Bands {
				if v, ok := maxes[b.Roleset]; !ok || b.Max > v {
					maxes[b.Roleset] = b.Max
				}
			}
		}
	}
	p.m.setBandMax(maxes)
}

// RecordBanded counts a request the band narrowed to roleset.
func (p *Planner) RecordBanded(roleset string, promptTokens int) {
	if p.m != nil {
		p.m.banded(roleset, promptTokens)
	}
}
