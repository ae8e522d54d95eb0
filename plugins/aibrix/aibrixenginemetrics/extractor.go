package aibrixenginemetrics

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	sourcemetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/source/metrics"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Type is the plugin type name.
const Type = "aibrix-engine-metrics-extractor"

// DefaultEngineLabelKey is GIE's engine label.
const DefaultEngineLabelKey = "inference.networking.k8s.io/engine-type"

// rateWindow is the drain-rate and token-rate window (AIBrix's [1m]).
const rateWindow = time.Minute

// minDrainRate is AIBrix's clamp_min on the drain rate.
const minDrainRate = 0.01

// Params are the plugin parameters.
type Params struct {
	// EngineLabelKey names the label that selects the mapping; the pod model's engine (podmodel.LabelEngine) is the
	// fallback, then DefaultEngine.
	EngineLabelKey string `json:"engineLabelKey"`
	DefaultEngine  string `json:"defaultEngine"`
	// EngineConfigs replace built-in mappings by name, or add new engines.
	EngineConfigs map[string]Mapping `json:"engineConfigs"`
}

// Extractor implements fwkdl.Extractor.
type Extractor struct {
	tn       fwkplugin.TypedName
	labelKey string
	def      string
	mappings map[string]Mapping
	now      func() time.Time

	mu      sync.Mutex
	history map[string]*rateHistory // by endpoint name
}

// Factory builds the extractor from YAML parameters.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	p := Params{}
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return nil, err
	}
	return New(name, p, time.Now)
}

// New builds an extractor with an injected clock.
func New(name string, p Params, now func() time.Time) (*Extractor, error) {
	if p.EngineLabelKey == "" {
		p.EngineLabelKey = DefaultEngineLabelKey
	}
	if p.DefaultEngine == "" {
		p.DefaultEngine = "vllm"
	}
	mappings := map[string]Mapping{}
	for k, v := range BuiltinMappings {
		mappings[k] = v
	}
	for k, v := range p.EngineConfigs {
		if k == "" {
			return nil, fmt.Errorf("%s %q: engineConfigs: empty engine name", Type, name)
		}
		mappings[k] = v
	}
	def := normalizeEngine(p.DefaultEngine)
	if _, ok := mappings[def]; !ok {
		return nil, fmt.Errorf("%s %q: defaultEngine %q has no mapping", Type, name, p.DefaultEngine)
	}
	return &Extractor{
		tn:       fwkplugin.TypedName{Type: Type, Name: name},
		labelKey: p.EngineLabelKey, def: def, mappings: mappings, now: now,
		history: map[string]*rateHistory{},
	}, nil
}

func normalizeEngine(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if a, ok := engineAliases[s]; ok {
		return a
	}
	return s
}

// TypedName implements fwkplugin.Plugin.
func (e *Extractor) TypedName() fwkplugin.TypedName { return e.tn }

// ExpectedInputType is the metrics-data-source output.
func (e *Extractor) ExpectedInputType() reflect.Type { return sourcemetrics.PrometheusMetricType }

func (e *Extractor) engineOf(meta *fwkdl.EndpointMetadata) string {
	if meta == nil {
		return e.def
	}
	if v := meta.Labels[e.labelKey]; v != "" {
		if _, ok := e.mappings[normalizeEngine(v)]; ok {
			return normalizeEngine(v)
		}
	}
	if p := podmodel.FromMetadata(meta); p.EngineDeclared {
		if _, ok := e.mappings[normalizeEngine(string(p.Engine))]; ok {
			return normalizeEngine(string(p.Engine))
		}
	}
	return e.def
}

// Extract reads one scrape into the endpoint's attribute.
func (e *Extractor) Extract(_ context.Context, data any, ep fwkdl.Endpoint) error {
	families, ok := data.(sourcemetrics.PrometheusMetricMap)
	if !ok {
		return fmt.Errorf("%s: unexpected input %T", Type, data)
	}
	meta := ep.GetMetadata()
	engine := e.engineOf(meta)
	m := e.extract(families, engine, endpointID(meta))
	ep.GetAttributes().Put(engineattr.AttributeKey, m)
	return nil
}

func endpointID(meta *fwkdl.EndpointMetadata) string {
	if meta == nil {
		return ""
	}
	return meta.NamespacedName.String()
}

func (e *Extractor) extract(families sourcemetrics.PrometheusMetricMap, engine, id string) *engineattr.Metrics {
	mp := e.mappings[engine]
	now := e.now()
	m := &engineattr.Metrics{Engine: engine, UpdateTime: now}
	m.Running, m.HasRunning = gauge(families, mp.Running, sumAgg)
	m.Waiting, m.HasWaiting = gauge(families, mp.Waiting, sumAgg)
	m.ProcessStart, m.HasProcessStart = gauge(families, ProcessStartMetric, maxAgg)
	m.KVUsage, m.HasKVUsage = gauge(families, mp.KVUsage, maxAgg)
	m.GenThroughput, m.HasGenThroughput = gauge(families, mp.GenThroughput, sumAgg)
	m.PrefillPrealloc, _ = gauge(families, mp.PrefillPreallocReqs, sumAgg)
	m.DecodePrealloc, _ = gauge(families, mp.DecodePreallocReqs, sumAgg)
	if sum, count, ok := histogram(families, mp.PrefillTime); ok && count > 0 {
		m.PrefillTimeMean, m.HasPrefillTimeMean = sum/count, true
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	h := e.history[id]
	if h == nil {
		h = &rateHistory{}
		e.history[id] = h
	}
	h.lastSeen = now
	if v, ok := gauge(families, mp.DrainRate1m, sumAgg); ok {
		m.DrainRate1m, m.HasDrainRate1m = max(v, minDrainRate), true
	} else if v, ok := gauge(families, mp.FinishedTotal, sumAgg); ok {
		if r, ok := h.finished.observe(now, v); ok {
			m.DrainRate1m, m.HasDrainRate1m = max(r, minDrainRate), true
		}
	}
	if !m.HasGenThroughput {
		if v, ok := gauge(families, mp.GenTokensTotal, sumAgg); ok {
			m.GenThroughput, m.HasGenThroughput = h.tokens.observe(now, v)
		}
	}
	e.prune(now)
	return m
}

// prune forgets endpoints not scraped for five windows.
func (e *Extractor) prune(now time.Time) {
	for id, h := range e.history {
		if now.Sub(h.lastSeen) > 5*rateWindow {
			delete(e.history, id)
		}
	}
}

type aggFn func(acc, v float64, first bool) float64

func sumAgg(acc, v float64, first bool) float64 {
	if first {
		return v
	}
	return acc + v
}

func maxAgg(acc, v float64, first bool) float64 {
	if first || v > acc {
		return v
	}
	return acc
}

// gauge aggregates every series of a gauge, counter or untyped family; non-finite samples are
// skipped; ok=false when the family is missing or has no usable sample.
func gauge(families sourcemetrics.PrometheusMetricMap, name string, agg aggFn) (float64, bool) {
	if name == "" {
		return 0, false
	}
	fam := families[name]
	if fam == nil {
		return 0, false
	}
	var acc float64
	found := false
	for _, mt := range fam.GetMetric() {
		v, ok := sampleValue(mt)
		if !ok || !finite(v) {
			continue
		}
		acc = agg(acc, v, !found)
		found = true
	}
	return acc, found
}

func sampleValue(m *dto.Metric) (float64, bool) {
	switch {
	case m.GetGauge() != nil:
		return m.GetGauge().GetValue(), true
	case m.GetCounter() != nil:
		return m.GetCounter().GetValue(), true
	case m.GetUntyped() != nil:
		return m.GetUntyped().GetValue(), true
	}
	return 0, false
}

// histogram sums sample sums and counts across series.
func histogram(families sourcemetrics.PrometheusMetricMap, name string) (sum, count float64, ok bool) {
	if name == "" || families[name] == nil {
		return 0, 0, false
	}
	for _, mt := range families[name].GetMetric() {
		h := mt.GetHistogram()
		if h == nil || !finite(h.GetSampleSum()) {
			continue
		}
		sum += h.GetSampleSum()
		count += float64(h.GetSampleCount())
		ok = true
	}
	return sum, count, ok
}

// finite reports whether f is a usable number.
func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
