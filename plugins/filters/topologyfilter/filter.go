// Package topologyfilter is llm-d's topology-affinity-filter: in a P/D cycle it keeps the
// candidates that share at least minAffinity (host < rack < zone < region) with the pod the
// other stage already picked (the decode pick for the prefill profile under decode-first, the
// prefill pick for the decode profile under prefill-first), so the KV transfer stays close.
// It always fails open: no peer, no peer topology, or no candidate close enough returns every
// candidate. pdgate adds a load allowance (llm-d PR #2870's idea): when the least-loaded close
// candidate carries more than loadAllowance requests over the least-loaded distant one, the
// filter keeps everyone and lets the scorers choose, so a hot local pod does not win over an
// idle one a rack away.
package topologyfilter

import (
	"context"
	"encoding/json"
	"fmt"
	"math"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/peer"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Type is the plugin type name.
const Type = "topology-affinity-filter"

// Modes.
const (
	ModeRequired  = "required"
	ModePreferred = "preferred"
)

// Parameters are the filter's parameters.
type Parameters struct {
	// MinAffinity is the loosest level a kept candidate may share with the peer: host, rack,
	// zone or region (default host, llm-d's).
	MinAffinity string `json:"minAffinity"`
	// TopologyProducerName is the topology-extractor instance whose attribute is read
	// (default topology-extractor).
	TopologyProducerName string `json:"topologyProducerName"`
	// Mode is required (default: llm-d's filter; the load allowance applies only when set) or
	// preferred (the load allowance applies and defaults to 0: close candidates are kept only
	// while none of them is busier than the idlest distant one).
	Mode string `json:"mode"`
	// LoadAllowance is the extra load (running + waiting requests, scraped) the least-loaded
	// close candidate may carry over the least-loaded distant one before the filter keeps
	// everyone. Unset: no load check in required mode, 0 in preferred mode. Must be >= 0.
	LoadAllowance *int `json:"loadAllowance"`
}

// Config is the validated configuration.
type Config struct {
	MinAffinity   podmodel.Level
	Producer      string
	Mode          string
	LoadAllowance int // < 0: no load check
}

// ParseParameters decodes (strictly), defaults and validates the parameters.
func ParseParameters(name string, raw json.RawMessage) (Config, error) {
	var p Parameters
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return Config{}, err
	}
	c := Config{MinAffinity: podmodel.LevelHost, Producer: p.TopologyProducerName, Mode: ModeRequired, LoadAllowance: -1}
	if p.MinAffinity != "" {
		lvl, ok := podmodel.ParseLevel(p.MinAffinity)
		if !ok || lvl == podmodel.LevelNone {
			return Config{}, fmt.Errorf("%s %q: parameter minAffinity=%q: must be one of host, rack, zone, region", Type, name, p.MinAffinity)
		}
		c.MinAffinity = lvl
	}
	switch p.Mode {
	case "", ModeRequired:
	case ModePreferred:
		c.Mode, c.LoadAllowance = ModePreferred, 0
	default:
		return Config{}, fmt.Errorf("%s %q: parameter mode=%q: must be %s or %s", Type, name, p.Mode, ModeRequired, ModePreferred)
	}
	if p.LoadAllowance != nil {
		if *p.LoadAllowance < 0 {
			return Config{}, fmt.Errorf("%s %q: parameter loadAllowance=%d: must be >= 0", Type, name, *p.LoadAllowance)
		}
		c.LoadAllowance = *p.LoadAllowance
	}
	return c, nil
}

// Filter is topology-affinity-filter.
type Filter struct {
	tn  fwkplugin.TypedName
	cfg Config
}

var _ fwksched.Filter = (*Filter)(nil)

// Factory builds the filter.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return pluginkit.Build(name, raw, ParseParameters, New)
}

// New builds the filter from a validated configuration.
func New(name string, c Config) *Filter {
	return &Filter{tn: pluginkit.TypedName(Type, name), cfg: c}
}

// TypedName implements fwkplugin.Plugin.
func (f *Filter) TypedName() fwkplugin.TypedName { return f.tn }

// Filter keeps the candidates close to the peer; see the package comment.
func (f *Filter) Filter(ctx context.Context, cs *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) []fwksched.Endpoint {
	kept, reason := f.filter(cs, eps)
	if l := pluginkit.DebugLogger(ctx); l.Enabled() {
		l.Info("topology affinity", "plugin", f.tn.String(), "candidates", len(eps), "kept", len(kept), "reason", reason)
	}
	return kept
}

func (f *Filter) filter(cs *fwksched.CycleState, eps []fwksched.Endpoint) ([]fwksched.Endpoint, string) {
	p, stage := peer.Of(cs)
	if p == nil {
		return eps, "no peer pick in this cycle: fail open"
	}
	pt, ok := podmodel.TopologyFromAttributes(p, f.cfg.Producer)
	if !ok {
		return eps, "the " + stage + " pick has no topology: fail open"
	}
	near := make([]fwksched.Endpoint, 0, len(eps))
	var far []fwksched.Endpoint
	for _, ep := range eps {
		t, ok := podmodel.TopologyFromAttributes(ep, f.cfg.Producer)
		if ok && podmodel.CompareTopology(pt, t) <= f.cfg.MinAffinity {
			near = append(near, ep)
		} else {
			far = append(far, ep)
		}
	}
	if len(near) == 0 {
		return eps, "no candidate within " + f.cfg.MinAffinity.String() + " of the " + stage + " pick: fail open"
	}
	if f.cfg.LoadAllowance >= 0 && len(far) > 0 {
		lc, okc := minLoad(near)
		lf, okf := minLoad(far)
		if okc && okf && lc-lf > f.cfg.LoadAllowance {
			return eps, fmt.Sprintf("the idlest close candidate carries %d more requests than the idlest distant one (allowance %d): keep all", lc-lf, f.cfg.LoadAllowance)
		}
	}
	return near, "kept the candidates within " + f.cfg.MinAffinity.String() + " of the " + stage + " pick"
}

// Load is an endpoint's scraped load: running plus waiting requests; ok is false without
// metrics (then the filter falls back to topology alone).
func Load(ep fwksched.Endpoint) (int, bool) {
	m := ep.GetMetrics()
	if m == nil {
		return 0, false
	}
	return m.RunningRequestsSize + m.WaitingQueueSize, true
}

func minLoad(eps []fwksched.Endpoint) (int, bool) {
	best, seen := math.MaxInt, false
	for _, ep := range eps {
		if l, ok := Load(ep); ok {
			seen = true
			best = min(best, l)
		}
	}
	return best, seen
}
