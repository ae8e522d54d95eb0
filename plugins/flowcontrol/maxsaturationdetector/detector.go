// Package maxsaturationdetector is llm-d v0.11's max-saturation-detector: a flow-control
// SaturationDetector whose value is the largest of its child detectors', so the pool gates as
// saturated as soon as any one signal is exhausted. A child may be scoped to P/D stages: the
// candidates are partitioned by llm-d.ai/role (plugins/lib/stagesat's tiers, llm-d's flow-control
// partition) and each stage runs only the children in its scope.
package maxsaturationdetector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkfc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/flowcontrol"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/stagesat"
)

// Type is the plugin type name.
const Type = "max-saturation-detector"

// MetricName is the per-child saturation gauge (llm-d's llm_d_epp_flow_control_detector_saturation).
const MetricName = "pdgate_flow_control_detector_saturation"

// Parameters are llm-d's.
type Parameters struct {
	// Detectors names the child SaturationDetector plugins, at least one.
	Detectors []string `json:"detectors"`
	// Stages scopes a child to stages (prefill, decode); a child without an entry runs for
	// every stage.
	Stages map[string][]string `json:"stages"`
}

// Validate checks what can be checked before the other plugins exist.
func (p *Parameters) Validate() error {
	if len(p.Detectors) == 0 {
		return errors.New("detectors: at least one child detector is required")
	}
	seen := map[string]bool{}
	for i, d := range p.Detectors {
		switch {
		case d == "":
			return fmt.Errorf("detectors[%d]: empty plugin name", i)
		case seen[d]:
			return fmt.Errorf("detectors[%d]: %q is listed twice", i, d)
		}
		seen[d] = true
	}
	for child, stages := range p.Stages {
		if !seen[child] {
			return fmt.Errorf("stages: %q is not one of the detectors", child)
		}
		for _, s := range stages {
			if s != stagesat.StagePrefill && s != stagesat.StageDecode {
				return fmt.Errorf("stages.%s: stage %q must be %q or %q", child, s, stagesat.StagePrefill, stagesat.StageDecode)
			}
		}
	}
	return nil
}

// ParseParameters decodes and validates; errors name the plugin and the field.
func ParseParameters(name string, raw json.RawMessage) (p Parameters, err error) {
	return p, pluginkit.Decode(Type, name, raw, &p)
}

type child struct {
	name     string
	detector fwkfc.SaturationDetector
	// stages is nil for a child that runs for every stage.
	stages map[string]bool
}

func (c child) runsFor(stage string) bool {
	return c.stages == nil || stage == stagesat.StageEffective || c.stages[stage]
}

// Detector is max-saturation-detector.
type Detector struct {
	tn     fwkplugin.TypedName
	params Parameters
	gauge  *prometheus.GaugeVec

	mu       sync.RWMutex
	children []child
}

var _ fwkfc.SaturationDetector = (*Detector)(nil)

// Factory builds the detector; its children are resolved once every plugin exists
// (ResolveReferences), so they may be declared before or after it.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p, err := ParseParameters(name, raw)
	if err != nil {
		return nil, err
	}
	gauge := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: MetricName,
		Help: "Last saturation each child of a max-saturation-detector reported, by child plugin name and P/D stage (prefill, decode, or effective when the candidates were not partitioned); 1.0 is saturated.",
	}, []string{"detector", "stage"})
	if gauge, err = pluginkit.Register(pluginkit.Registerer(handle), gauge); err != nil {
		return nil, pluginkit.Errorf(Type, name, "%w", err)
	}
	return &Detector{tn: pluginkit.TypedName(Type, name), params: p, gauge: gauge}, nil
}

// TypedName implements fwkplugin.Plugin.
func (d *Detector) TypedName() fwkplugin.TypedName { return d.tn }

// ResolveReferences binds the children: each must name a SaturationDetector plugin other than
// this one, and the children must not lead back to it.
func (d *Detector) ResolveReferences(handle fwkplugin.Handle) error {
	children := make([]child, 0, len(d.params.Detectors))
	for i, name := range d.params.Detectors {
		p := handle.Plugin(name)
		if p == nil {
			return pluginkit.Errorf(Type, d.tn.Name, "detectors[%d]: no plugin named %q", i, name)
		}
		sd, ok := p.(fwkfc.SaturationDetector)
		if !ok {
			return pluginkit.Errorf(Type, d.tn.Name, "detectors[%d]: plugin %q (type %s) is not a saturation detector", i, name, p.TypedName().Type)
		}
		if d.reaches(handle, name, map[string]bool{}) {
			return pluginkit.Errorf(Type, d.tn.Name, "detectors[%d]: %q leads back to this detector", i, name)
		}
		c := child{name: name, detector: sd}
		if stages, ok := d.params.Stages[name]; ok {
			c.stages = map[string]bool{}
			for _, s := range stages {
				c.stages[s] = true
			}
		}
		children = append(children, c)
	}
	d.mu.Lock()
	d.children = children
	d.mu.Unlock()
	return nil
}

// reaches reports whether the plugin called name is this detector or a max-saturation-detector
// whose children lead to it.
func (d *Detector) reaches(handle fwkplugin.Handle, name string, seen map[string]bool) bool {
	if name == d.tn.Name {
		return true
	}
	if seen[name] {
		return false
	}
	seen[name] = true
	m, ok := handle.Plugin(name).(*Detector)
	return ok && slices.ContainsFunc(m.params.Detectors, func(c string) bool { return d.reaches(handle, c, seen) })
}

// Saturation is the maximum over the children in scope. The candidates are partitioned into
// the prefill and the decode tier by llm-d.ai/role; each non-empty tier runs the children
// scoped to it (or to no stage) on its endpoints, and a tier with no child in scope reports 0.
// When no candidate is in either tier (a combined-only pool, an empty list) the candidates are
// not partitioned and every child runs on all of them.
func (d *Detector) Saturation(ctx context.Context, candidates []fwkdl.Endpoint) float64 {
	d.mu.RLock()
	children := d.children
	d.mu.RUnlock()
	prefill, decode := stagesat.Split(candidates)
	if len(prefill) == 0 && len(decode) == 0 {
		return d.stage(ctx, children, stagesat.StageEffective, candidates)
	}
	var s float64
	if len(prefill) > 0 {
		s = d.stage(ctx, children, stagesat.StagePrefill, prefill)
	}
	if len(decode) > 0 {
		s = max(s, d.stage(ctx, children, stagesat.StageDecode, decode))
	}
	return s
}

func (d *Detector) stage(ctx context.Context, children []child, stage string, eps []fwkdl.Endpoint) float64 {
	var s float64
	for _, c := range children {
		if !c.runsFor(stage) {
			continue
		}
		v := c.detector.Saturation(ctx, eps)
		d.gauge.WithLabelValues(c.name, stage).Set(v)
		s = max(s, v)
	}
	return s
}
