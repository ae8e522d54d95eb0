// Package engineattr is the endpoint attribute the engine-metrics extractor (plugin
// aibrix-engine-metrics) writes and the AIBrix scorers and pair selection read: generation
// throughput, running and waiting counts, KV usage, the prefill-time histogram's mean, the
// running-request drain rate and SGLang's PD pre-allocation queues. It lives apart from the
// extractor so that readers depend on the attribute's shape, not on the plugin that fills it
// (the way GIE keeps its attribute types outside its plugins).
package engineattr

import (
	"time"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
)

// AttributeKey is the endpoint attribute holding *Metrics.
const AttributeKey = "pdgate.io/engine-metrics"

// Metrics is one endpoint's engine view. Has* flags distinguish "missing" from zero: AIBrix's
// policies treat missing metrics differently (exclusions, fallbacks, cold start).
type Metrics struct {
	Engine string

	GenThroughput    float64 // generated tokens per second
	HasGenThroughput bool
	Running          float64
	HasRunning       bool
	Waiting          float64
	HasWaiting       bool
	KVUsage          float64 // fraction 0..1
	HasKVUsage       bool
	// PrefillTimeMean is the mean of the request prefill-time histogram, in seconds.
	PrefillTimeMean    float64
	HasPrefillTimeMean bool
	// DrainRate1m is finished requests per second over the last minute, clamped to ≥ 0.01
	// like AIBrix's clamp_min(rate(...[1m]), 0.01).
	DrainRate1m     float64
	HasDrainRate1m  bool
	PrefillPrealloc float64 // sglang:num_prefill_prealloc_queue_reqs (0 when missing)
	DecodePrealloc  float64 // sglang:num_decode_prealloc_queue_reqs (0 when missing)
	// ProcessStart is the engine process's start time (process_start_time_seconds, Unix
	// seconds, exported by Python's and Go's Prometheus clients): a new value means the
	// engine restarted and lost what it cached.
	ProcessStart    float64
	HasProcessStart bool

	UpdateTime time.Time
}

// Clone implements fwkdl.Cloneable.
func (m *Metrics) Clone() fwkdl.Cloneable {
	if m == nil {
		return (*Metrics)(nil)
	}
	c := *m
	return &c
}

// Getter is what carries attributes: GIE's scheduling and data-layer endpoints both do.
type Getter interface {
	Get(string) (fwkdl.Cloneable, bool)
}

// Get returns an endpoint's engine metrics, or nil when none were extracted yet.
func Get(ep Getter) *Metrics {
	if ep == nil {
		return nil
	}
	v, ok := ep.Get(AttributeKey)
	if !ok {
		return nil
	}
	m, _ := v.(*Metrics)
	return m
}
