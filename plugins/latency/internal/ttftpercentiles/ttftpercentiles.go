// Package ttftpercentiles is what latency-observer-producer-hub publishes and
// latency-observation-scorer-hub reads (llm-d's TTFTPercentiles attribute), and how both find
// the other plugins they need once the whole configuration is loaded: the producer instance,
// and GIE's inflight-load-producer, whose live in-flight counts both read.
package ttftpercentiles

import (
	"fmt"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	attrconcurrency "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/concurrency"
)

// Type names of the pair and of GIE's in-flight producer.
const (
	ProducerType         = "latency-observer-producer-hub"
	ScorerType           = "latency-observation-scorer-hub"
	InFlightProducerType = "inflight-load-producer"
)

// DataKey is the attribute key under which the producer instance called producer publishes
// (llm-d's TTFTPercentilesDataKey qualified by the producer's name).
func DataKey(producer string) string { return "TTFTPercentilesDataKey/" + producer }

// TTFTPercentiles summarises an endpoint's recent time to first token, in seconds. The
// endpoint's current in-flight count is not in it: readers take it live from InFlightLoad.
type TTFTPercentiles struct {
	// FloorTTFT is the P10 over the history of per-bucket P10s; 0 until the history has an
	// entry, when WindowFloorTTFT stands in.
	FloorTTFT       float64
	WindowFloorTTFT float64
	// LowLoadTTFT and TypicalLoadTTFT are the short window's low and typical percentiles;
	// the InflightAt fields are the mean in-flight-at-dispatch over the ±10 percentile band
	// around each.
	LowLoadTTFT           float64
	TypicalLoadTTFT       float64
	InflightAtLowLoad     float64
	InflightAtTypicalLoad float64
	// RecentRequestCount is the short window's size; Observations the cumulative count.
	RecentRequestCount int
	Observations       int64
	// CalibrationThreshold is the producer's minRequests.
	CalibrationThreshold int
}

// Floor is the service floor, or 0 while the endpoint is cold (fewer observations than the
// calibration threshold).
func (m *TTFTPercentiles) Floor() float64 {
	if m == nil || m.Observations < int64(m.CalibrationThreshold) {
		return 0
	}
	if m.FloorTTFT > 0 {
		return m.FloorTTFT
	}
	return m.WindowFloorTTFT
}

// Clone implements fwkdl.Cloneable.
func (m *TTFTPercentiles) Clone() fwkdl.Cloneable {
	if m != nil {
		c := *m
		return &c
	}
	return nil
}

// Getter carries attributes (scheduling and data-layer endpoints).
type Getter interface {
	Get(key string) (fwkdl.Cloneable, bool)
}

// Read returns the snapshot under key, nil when there is none.
func Read(g Getter, key string) *TTFTPercentiles {
	v, ok := g.Get(key)
	if !ok {
		return nil
	}
	m, _ := v.(*TTFTPercentiles)
	return m
}

// InFlight returns the endpoint's live in-flight request count, as inflight-load-producer left
// it on the endpoint for this request, and whether there is one.
func InFlight(g Getter) (int64, bool) {
	v, ok := g.Get(attrconcurrency.InFlightLoadKey)
	if !ok {
		return 0, false
	}
	l, ok := v.(*attrconcurrency.InFlightLoad)
	if !ok || l == nil {
		return 0, false
	}
	return l.Requests, true
}

// EnsureInFlightProducer makes sure an inflight-load-producer runs: name, when set, must be
// one; otherwise any plugin producing InFlightLoad will do, and when there is none one is
// added under its type name, as llm-d's Required data keys auto-create it.
func EnsureInFlightProducer(handle fwkplugin.Handle, name string) error {
	if name != "" {
		p := handle.Plugin(name)
		if p == nil {
			return fmt.Errorf("inFlightLoadProducerName: no plugin named %q", name)
		}
		if !producesInFlight(p) {
			return fmt.Errorf("inFlightLoadProducerName: plugin %q (type %s) does not produce %s", name, p.TypedName().Type, attrconcurrency.InFlightLoadKey)
		}
		return nil
	}
	for _, p := range handle.GetAllPlugins() {
		if producesInFlight(p) {
			return nil
		}
	}
	return AddByType(handle, InFlightProducerType)
}

func producesInFlight(p fwkplugin.Plugin) bool {
	pr, ok := p.(fwkplugin.ProducerPlugin)
	if !ok {
		return false
	}
	_, ok = pr.Produces()[attrconcurrency.InFlightLoadKey]
	return ok
}

// AddByType builds a plugin of a registered type with its defaults and adds it under its type
// name (the registry, not an import, so no plugin depends on another's package).
func AddByType(handle fwkplugin.Handle, pluginType string) error {
	factory := fwkplugin.Registry[pluginType]
	if factory == nil {
		return fmt.Errorf("plugin type %s is not registered", pluginType)
	}
	p, err := factory(pluginType, nil, handle)
	if err != nil {
		return fmt.Errorf("creating %s: %w", pluginType, err)
	}
	handle.AddPlugin(pluginType, p)
	return nil
}
