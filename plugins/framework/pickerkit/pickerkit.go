// Package pickerkit is what pdgate's pickers (max-score-picker, random-picker,
// weighted-random-picker, GIE v1.5.0's types with an injectable random source) share: the
// picker type itself (a picker package supplies its type name and its PickFunc), their one
// parameter, the random source each instance owns, and the shuffle that breaks ties.
package pickerkit

import (
	"cmp"
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// DefaultMaxNumOfEndpoints is GIE's default for every picker.
const DefaultMaxNumOfEndpoints = 1

// Parameters are the pickers' parameters (GIE's pickerParameters).
type Parameters struct {
	// MaxNumOfEndpoints is how many endpoints the picker returns at most; ≤ 0 falls back to
	// the default, as GIE does.
	MaxNumOfEndpoints int `json:"maxNumOfEndpoints"`
}

// ParseParameters decodes the parameters of picker type pluginType, instance name; unknown
// fields are errors.
func ParseParameters(pluginType, name string, raw json.RawMessage) (Parameters, error) {
	p := Parameters{MaxNumOfEndpoints: DefaultMaxNumOfEndpoints}
	if err := pluginkit.Decode(pluginType, name, raw, &p); err != nil {
		return Parameters{}, err
	}
	p.MaxNumOfEndpoints = Max(p.MaxNumOfEndpoints)
	return p, nil
}

// Max is n, or the default when n ≤ 0 (GIE's fallback on an invalid value).
func Max(n int) int {
	if n <= 0 {
		return DefaultMaxNumOfEndpoints
	}
	return n
}

// Base is what every picker instance holds: its name, how many endpoints it returns and its
// random source. Picker embeds it.
type Base struct {
	tn fwkplugin.TypedName
	// Max is how many endpoints Pick returns at most.
	Max int
	// Rand breaks ties (or draws the pick).
	Rand *Rand
}

// NewBase is the Base of instance name of picker type pluginType returning at most
// maxNumOfEndpoints endpoints (≤ 0: the default) drawing from rnd (nil: time-seeded).
func NewBase(pluginType, name string, maxNumOfEndpoints int, rnd *Rand) Base {
	if rnd == nil {
		rnd = NewRand(0, false)
	}
	return Base{tn: fwkplugin.TypedName{Type: pluginType, Name: name}, Max: Max(maxNumOfEndpoints), Rand: rnd}
}

// TypedName implements fwkplugin.Plugin.
func (b *Base) TypedName() fwkplugin.TypedName { return b.tn }

// Build is a picker factory's body: it decodes the parameters of instance name and builds the
// picker with newPicker, its random source seeded from handle's seed when there is one.
func Build[P fwkplugin.Plugin](pluginType, name string, raw json.RawMessage, handle fwkplugin.Handle,
	newPicker func(name string, maxNumOfEndpoints int, rnd *Rand) P) (fwkplugin.Plugin, error) {
	p, err := ParseParameters(pluginType, name, raw)
	if err != nil {
		return nil, err
	}
	return newPicker(name, p.MaxNumOfEndpoints, RandFor(handle, name)), nil
}

// PickFunc is how a picker type picks from the candidates: p holds the instance's Max and
// random source. It may reorder eps.
type PickFunc func(ctx context.Context, p *Picker, eps []*fwksched.ScoredEndpoint) *fwksched.ProfileRunResult

// Picker is a picker instance of any of the pickers' types: its Base and its type's PickFunc.
type Picker struct {
	Base
	pick PickFunc
}

var _ fwksched.Picker = (*Picker)(nil)

// Pick implements fwksched.Picker with the type's PickFunc.
func (p *Picker) Pick(ctx context.Context, _ *fwksched.CycleState, eps []*fwksched.ScoredEndpoint) *fwksched.ProfileRunResult {
	return p.pick(ctx, p, eps)
}

// LogCandidates logs msg with the candidates at GIE's debug verbosity, as GIE's pickers do
// before they pick.
func (p *Picker) LogCandidates(ctx context.Context, msg string, eps []*fwksched.ScoredEndpoint) {
	// A disabled Info still boxes its arguments, so they are only built when the level is on.
	if logger := pluginkit.DebugLogger(ctx); logger.Enabled() {
		logger.Info(msg, "max-num-of-endpoints", p.Max, "num-of-candidates", len(eps), "scored-endpoints", eps)
	}
}

// Uniform is random-picker's PickFunc, to which weighted-random-picker delegates when no
// score is positive (as GIE's does): shuffle the candidates, return the first Max.
func Uniform(ctx context.Context, p *Picker, eps []*fwksched.ScoredEndpoint) *fwksched.ProfileRunResult {
	p.LogCandidates(ctx, "Selecting endpoints from candidates randomly", eps)
	p.Rand.Shuffle(eps)
	return Targets(eps, p.Max)
}

// Kind is a picker type: the type name it registers under and how it picks.
type Kind struct {
	Type string
	Pick PickFunc
}

// New builds a picker of kind k returning at most maxNumOfEndpoints endpoints (≤ 0: the
// default) that draws from rnd (nil: time-seeded).
func (k Kind) New(name string, maxNumOfEndpoints int, rnd *Rand) *Picker {
	return &Picker{Base: NewBase(k.Type, name, maxNumOfEndpoints, rnd), pick: k.Pick}
}

// Factory is kind k's plugin factory: its random source is seeded from the handle's seed,
// if any (see Build).
func (k Kind) Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return Build(k.Type, name, raw, handle, k.New)
}

// Descending orders a before b when a is larger: a stable sort by it keeps the input order
// among equals (and among NaNs, which compare equal to everything, as in GIE's pickers).
func Descending(a, b float64) int {
	switch {
	case a > b:
		return -1
	case a < b:
		return 1
	}
	return 0
}

// Rand is a picker instance's random source, safe for concurrent Picks. A seeded one also
// puts its candidates in a canonical order before drawing (see Shuffle).
type Rand struct {
	mu     sync.Mutex
	r      *rand.Rand
	seeded bool
}

// NewRand is a source seeded with seed when seeded, else from the time (GIE's behaviour).
func NewRand(seed uint64, seeded bool) *Rand {
	if !seeded {
		seed = uint64(time.Now().UnixNano())
	}
	return &Rand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), seeded: seeded}
}

// RandFor is the source of plugin instance name built from h: seeded from the seed on h's
// context (pluginkit.WithSeed) and the name when there is one, else from the time.
func RandFor(h fwkplugin.Handle, name string) *Rand {
	seed, ok := pluginkit.SeedFor(h, name)
	return NewRand(seed, ok)
}

// Seeded reports whether the source was seeded (decisions are reproducible).
func (r *Rand) Seeded() bool { return r.seeded }

// Float64 is a uniform draw in [0, 1).
func (r *Rand) Float64() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.r.Float64()
}

// Floats draws len(out) uniform numbers in [0, 1) under one lock.
func (r *Rand) Floats(out []float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range out {
		out[i] = r.r.Float64()
	}
}

// Shuffle shuffles eps in place. A seeded source first sorts them by namespaced name: the
// scheduler builds the candidate slice from a map, so its order differs from run to run and a
// seeded shuffle of it alone would not repeat. Unseeded, the order is random anyway and the
// sort is skipped (the request path's cost stays GIE's).
func (r *Rand) Shuffle(eps []*fwksched.ScoredEndpoint) {
	if r.seeded {
		Canonical(eps)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.r.Shuffle(len(eps), func(i, j int) { eps[i], eps[j] = eps[j], eps[i] })
}

// Canonical sorts eps by namespaced name (namespace, then name).
func Canonical(eps []*fwksched.ScoredEndpoint) {
	slices.SortFunc(eps, func(a, b *fwksched.ScoredEndpoint) int {
		na, nb := a.GetMetadata().NamespacedName, b.GetMetadata().NamespacedName
		return cmp.Or(cmp.Compare(na.Namespace, nb.Namespace), cmp.Compare(na.Name, nb.Name))
	})
}

// Targets returns the first n of eps as the profile's result.
func Targets(eps []*fwksched.ScoredEndpoint, n int) *fwksched.ProfileRunResult {
	eps = eps[:min(n, len(eps))]
	if len(eps) == 1 {
		// The usual answer, one endpoint (every profile of every request): the result and its
		// slice in one allocation.
		one := &struct {
			res fwksched.ProfileRunResult
			eps [1]fwksched.Endpoint
		}{}
		one.eps[0] = eps[0]
		one.res.TargetEndpoints = one.eps[:]
		return &one.res
	}
	out := make([]fwksched.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = e
	}
	return &fwksched.ProfileRunResult{TargetEndpoints: out}
}
