// Package utilizationdetector is utilization-detector as llm-d v0.11 ships it: GIE's detector
// (per-endpoint max(waiting/queueDepthThreshold, kv/kvCacheUtilThreshold), pool mean, the
// headroom Filter) plus llm-d's stalenessPolicy, which says what an endpoint whose metrics are
// missing or older than metricsStalenessThreshold counts for in the pool mean. It is
// registered under GIE's type name, so every configuration that names utilization-detector,
// and the detector GIE's loader injects when none is configured, get it; with the default
// policy it is GIE's detector unchanged.
package utilizationdetector

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkfc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/flowcontrol"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Type is the plugin type name, GIE's and llm-d's.
const Type = utilization.UtilizationDetectorType

// Parameters are llm-d v0.11's: GIE's four plus stalenessPolicy.
type Parameters struct {
	QueueDepthThreshold       int             `json:"queueDepthThreshold"`
	KVCacheUtilThreshold      float64         `json:"kvCacheUtilThreshold"`
	MetricsStalenessThreshold metav1.Duration `json:"metricsStalenessThreshold"`
	Headroom                  float64         `json:"headroom"`
	StalenessPolicy           string          `json:"stalenessPolicy"`
}

// DefaultParameters are GIE's defaults and llm-d's fail-closed policy.
func DefaultParameters() Parameters {
	return Parameters{
		QueueDepthThreshold:       utilization.DefaultQueueDepthThreshold,
		KVCacheUtilThreshold:      utilization.DefaultKVCacheUtilThreshold,
		MetricsStalenessThreshold: metav1.Duration{Duration: utilization.DefaultMetricsStalenessThreshold},
		StalenessPolicy:           PolicySaturated,
	}
}

// The stalenessPolicy values.
const (
	// PolicySaturated counts a stale endpoint as fully saturated (1.0): fail-closed, llm-d's
	// default and GIE's only behaviour.
	PolicySaturated = "saturated"
	// PolicyIgnore leaves stale endpoints out of the mean; when every endpoint is stale the
	// pool reads 0.0 and dispatch goes on.
	PolicyIgnore = "ignore"
)

// Validate applies GIE's rules, all errors together as GIE reports them, and llm-d's policy
// values.
func (p *Parameters) Validate() error {
	var errs []error
	if p.QueueDepthThreshold <= 0 {
		errs = append(errs, fmt.Errorf("queueDepthThreshold must be > 0, got %d", p.QueueDepthThreshold))
	}
	if p.KVCacheUtilThreshold <= 0 || p.KVCacheUtilThreshold > 1 {
		errs = append(errs, fmt.Errorf("kvCacheUtilThreshold must be in (0, 1], got %g", p.KVCacheUtilThreshold))
	}
	if p.MetricsStalenessThreshold.Duration <= 0 {
		errs = append(errs, fmt.Errorf("metricsStalenessThreshold must be > 0, got %v", p.MetricsStalenessThreshold.Duration))
	}
	if p.Headroom < 0 {
		errs = append(errs, fmt.Errorf("headroom must be >= 0, got %g", p.Headroom))
	}
	if p.StalenessPolicy != PolicySaturated && p.StalenessPolicy != PolicyIgnore {
		errs = append(errs, fmt.Errorf("stalenessPolicy must be %q or %q, got %q", PolicySaturated, PolicyIgnore, p.StalenessPolicy))
	}
	return errors.Join(errs...)
}

// ParseParameters decodes, defaults and validates; errors name the plugin and the field.
func ParseParameters(name string, raw json.RawMessage) (p Parameters, err error) {
	p = DefaultParameters()
	return p, pluginkit.Decode(Type, name, raw, &p)
}

// Detector is GIE's utilization detector with llm-d's staleness policy on Saturation; its
// Filter is GIE's (a stale endpoint is dropped there whatever the policy, as in llm-d).
type Detector struct {
	*utilization.Detector
	staleAfter  time.Duration
	ignoreStale bool
	queue       float64
	kv          float64
	// now, when set (UseClock: bench sim's virtual clock), is the clock metrics' age is taken
	// on; GIE's detector reads the wall clock, against which every virtual-time scrape is stale.
	now func() time.Time
}

var (
	_ fwkfc.SaturationDetector = (*Detector)(nil)
	_ fwksched.Filter          = (*Detector)(nil)
	_ contract.Clocked         = (*Detector)(nil)
)

// Factory builds the detector.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return pluginkit.Build(name, raw, ParseParameters, func(name string, p Parameters) *Detector {
		return New(pluginkit.Context(handle), pluginkit.TypedName(Type, name).Name, p)
	})
}

// New builds the detector from validated parameters; ctx carries the logger.
func New(ctx context.Context, name string, p Parameters) *Detector {
	inner := utilization.NewDetector(name, utilization.Config{
		QueueDepthThreshold:       p.QueueDepthThreshold,
		KVCacheUtilThreshold:      p.KVCacheUtilThreshold,
		MetricsStalenessThreshold: p.MetricsStalenessThreshold.Duration,
		Headroom:                  p.Headroom,
	}, log.FromContext(ctx))
	return &Detector{Detector: inner, staleAfter: p.MetricsStalenessThreshold.Duration, ignoreStale: p.StalenessPolicy == PolicyIgnore,
		queue: float64(p.QueueDepthThreshold), kv: p.KVCacheUtilThreshold}
}

// UseClock implements contract.Clocked: Saturation takes metrics' age on now.
func (d *Detector) UseClock(now func() time.Time) { d.now = now }

// Saturation is GIE's pool mean. Under the ignore policy the mean is GIE's over the fresh
// endpoints only, and 0.0 when every endpoint is stale; an empty list still reads 1.0.
func (d *Detector) Saturation(ctx context.Context, candidates []fwkdl.Endpoint) float64 {
	if d.now != nil {
		return d.saturationAt(d.now(), candidates)
	}
	if !d.ignoreStale || len(candidates) == 0 {
		return d.Detector.Saturation(ctx, candidates)
	}
	fresh := make([]fwkdl.Endpoint, 0, len(candidates))
	for _, ep := range candidates {
		if m := ep.GetMetrics(); m != nil && time.Since(m.UpdateTime) <= d.staleAfter {
			fresh = append(fresh, ep)
		}
	}
	if len(fresh) == 0 {
		return 0
	}
	return d.Detector.Saturation(ctx, fresh)
}

// saturationAt is the same pool mean with metrics' age taken at now: each endpoint scores the
// larger of waiting/queueDepthThreshold and kv/kvCacheUtilThreshold, a stale one 1.0 (or, under
// the ignore policy, nothing); an empty pool, 1.0.
func (d *Detector) saturationAt(now time.Time, candidates []fwkdl.Endpoint) float64 {
	if len(candidates) == 0 {
		return 1.0
	}
	sum, n := 0.0, 0
	for _, ep := range candidates {
		m := ep.GetMetrics()
		if m == nil || now.Sub(m.UpdateTime) > d.staleAfter {
			if !d.ignoreStale {
				sum, n = sum+1, n+1
			}
			continue
		}
		sum += max(float64(m.WaitingQueueSize)/d.queue, m.KVCacheUsagePercent/d.kv)
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}
