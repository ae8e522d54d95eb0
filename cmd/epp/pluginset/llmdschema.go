package pluginset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
	"sigs.k8s.io/yaml"

	extractormetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/extractor/metrics"
	sourcemetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/source/metrics"
)

// The keys of llm-d's EndpointPickerConfig schema (2026-08) that GIE v1.5.0's strict decoder
// rejects, and what the loader makes of them before GIE's decoder runs:
//
//   - featureGates "name=value" (strconv.ParseBool): a true gate becomes its bare name, a false
//     one is dropped; llm-d's haPopulateNonLeaderDatastore is accepted and dropped (logged).
//   - flowControl.saturationDetector → GIE's top-level saturationDetector (both set and naming
//     different plugins is an error).
//   - flowControl.noEndpointRequestTTL, defaultNegativePriorityBand, enableEviction: accepted
//     and logged as not enforced (GIE v1.5.0's flow control has one TTL, provisions every
//     unlisted band from defaultPriorityBand and has no eviction wiring).
//   - flowControl.defaultRequestTTL defaults to llm-d's 60s in llm-d-apiVersion documents with
//     the flowControl gate on (GIE's default is "until the client gives up").
//   - requestHandler.parsers → GIE's single parser (the first entry; a bare type name is
//     instantiated as a plugin of that type, as llm-d does); the others are logged as unused.
//   - dataLayer.injectDefaults/discovery/peerDiscovery/crossReplicaSyncerPluginRef/
//     crossReplicaSyncInterval: dropped (logged). In llm-d-apiVersion documents the default
//     metrics source is additive, as in llm-d: an explicit dataLayer without a
//     metrics-data-source source gets metrics-data-source + core-metrics-extractor appended
//     (unless injectDefaults: false), so scorers reading scraped metrics keep working.
//
// A document without these keys reaches GIE's decoder byte for byte.

// LLMD field names the adaptation reads.
const (
	gateFlowControl   = "flowControl"
	gateHAPopulate    = "haPopulateNonLeaderDatastore"
	llmdDefaultTTL    = "60s"
	defaultSourceName = "metrics-data-source"
)

type adapter struct {
	doc     map[string]any
	llmd    bool
	changed bool
	logger  logr.Logger
}

// adaptSchema maps llm-d-only keys onto GIE's schema (see above). llmd says the document
// carried llm-d's apiVersion.
func adaptSchema(b []byte, llmd bool, logger logr.Logger) ([]byte, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return b, nil
	}
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("config: not a YAML/JSON document: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil || doc == nil {
		return b, nil // not a mapping: GIE's decoder reports it
	}
	a := &adapter{doc: doc, llmd: llmd, logger: logger}
	steps := []func() error{a.featureGates, a.flowControl, a.requestHandler, a.dataLayer}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, fmt.Errorf("config: %w", err)
		}
	}
	if !a.changed {
		return b, nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return out, nil
}

func (a *adapter) featureGates() error {
	raw, ok := a.doc["featureGates"]
	if !ok || raw == nil {
		return nil
	}
	list, ok := raw.([]any)
	if !ok {
		return nil // GIE's decoder reports the type error
	}
	out := make([]any, 0, len(list))
	seen := map[string]bool{}
	for i, g := range list {
		s, ok := g.(string)
		if !ok {
			return fmt.Errorf("featureGates[%d]: want a string, got %v", i, g)
		}
		name, val, hasVal := strings.Cut(s, "=")
		name = strings.TrimSpace(name)
		on := true
		if hasVal {
			v, err := strconv.ParseBool(strings.ToLower(strings.TrimSpace(val)))
			if err != nil {
				return fmt.Errorf("featureGates[%d] %q: value %q is not a boolean", i, s, val)
			}
			on = v
			a.changed = true
		}
		if name == gateHAPopulate {
			a.changed = true
			a.logger.Info("featureGates: llm-d's haPopulateNonLeaderDatastore is accepted and ignored: pdgate's Kubernetes mode runs GIE's reconcilers as GIE does", "value", on)
			continue
		}
		if !on || seen[name] {
			a.changed = a.changed || seen[name]
			continue
		}
		seen[name] = true
		out = append(out, name)
	}
	a.doc["featureGates"] = out
	return nil
}

func (a *adapter) gateOn(name string) bool {
	list, _ := a.doc["featureGates"].([]any)
	for _, g := range list {
		if g == name {
			return true
		}
	}
	return false
}

func (a *adapter) flowControl() error {
	fc, ok := a.doc["flowControl"].(map[string]any)
	if !ok {
		return nil
	}
	if sd, ok := fc["saturationDetector"]; ok {
		a.changed = true
		delete(fc, "saturationDetector")
		ref := pluginRefOf(sd)
		if top, ok := a.doc["saturationDetector"]; ok && top != nil {
			if topRef := pluginRefOf(top); ref != "" && topRef != "" && topRef != ref {
				return fmt.Errorf("flowControl.saturationDetector.pluginRef %q and saturationDetector.pluginRef %q name different detectors", ref, topRef)
			}
		} else if sd != nil {
			a.doc["saturationDetector"] = sd
		}
	}
	notEnforced := map[string]string{
		"noEndpointRequestTTL":        "GIE v1.5.0's flow control has one queue TTL (defaultRequestTTL) whether or not the pool has endpoints",
		"defaultNegativePriorityBand": "GIE v1.5.0 provisions every unlisted priority, negative ones included, from defaultPriorityBand; list negative bands in priorityBands",
		"enableEviction":              "in-flight eviction is not wired in GIE v1.5.0's flow control",
	}
	for _, k := range []string{"noEndpointRequestTTL", "defaultNegativePriorityBand", "enableEviction"} {
		v, ok := fc[k]
		if !ok {
			continue
		}
		a.changed = true
		delete(fc, k)
		if k == "enableEviction" && v == false {
			continue
		}
		a.logger.Info("flowControl."+k+" is accepted but not enforced", "reason", notEnforced[k], "value", v)
	}
	if a.llmd && a.gateOn(gateFlowControl) {
		if _, ok := fc["defaultRequestTTL"]; !ok {
			fc["defaultRequestTTL"] = llmdDefaultTTL
			a.changed = true
			a.logger.V(1).Info("flowControl.defaultRequestTTL defaults to llm-d's 60s")
		}
	}
	if !a.gateOn(gateFlowControl) {
		for k := range fc {
			a.logger.Info("flowControl."+k+" is set but the flowControl feature gate is off: ignored (as in llm-d)", "key", k)
		}
	}
	if len(fc) == 0 {
		delete(a.doc, "flowControl")
		a.changed = true
	}
	return nil
}

func pluginRefOf(v any) string {
	m, _ := v.(map[string]any)
	s, _ := m["pluginRef"].(string)
	return s
}

// plugins returns the plugin list and a name → type map (an empty name is the type).
func (a *adapter) plugins() ([]any, map[string]string) {
	list, _ := a.doc["plugins"].([]any)
	byName := map[string]string{}
	for _, p := range list {
		m, _ := p.(map[string]any)
		typ, _ := m["type"].(string)
		name, _ := m["name"].(string)
		if name == "" {
			name = typ
		}
		byName[name] = typ
	}
	return list, byName
}

func (a *adapter) addPlugin(name, typ string) {
	list, _ := a.plugins()
	a.doc["plugins"] = append(list, map[string]any{"name": name, "type": typ})
	a.changed = true
}

func (a *adapter) requestHandler() error {
	rh, ok := a.doc["requestHandler"]
	if !ok {
		return nil
	}
	a.changed = true
	delete(a.doc, "requestHandler")
	m, _ := rh.(map[string]any)
	parsers, _ := m["parsers"].([]any)
	for k := range m {
		if k != "parsers" {
			return fmt.Errorf("requestHandler: unknown field %q", k)
		}
	}
	if len(parsers) == 0 {
		return nil
	}
	first := pluginRefOf(parsers[0])
	if first == "" {
		return fmt.Errorf("requestHandler.parsers[0]: missing pluginRef")
	}
	if top, ok := a.doc["parser"]; ok && top != nil {
		if pluginRefOf(top) != first {
			return fmt.Errorf("requestHandler.parsers[0].pluginRef %q and parser.pluginRef %q disagree", first, pluginRefOf(top))
		}
	} else {
		a.doc["parser"] = map[string]any{"pluginRef": first}
	}
	if _, byName := a.plugins(); byName[first] == "" {
		a.addPlugin(first, first) // llm-d instantiates an undeclared ref as a plugin of that type
	}
	if len(parsers) > 1 {
		var rest []string
		for _, p := range parsers[1:] {
			rest = append(rest, pluginRefOf(p))
		}
		a.logger.Info("requestHandler.parsers: GIE v1.5.0's request path has one parser; using the first", "parser", first, "unused", rest)
	}
	return nil
}

func (a *adapter) dataLayer() error {
	dl, ok := a.doc["dataLayer"].(map[string]any)
	if !ok {
		return nil
	}
	inject := true
	if v, ok := dl["injectDefaults"]; ok {
		b, isBool := v.(bool)
		if !isBool {
			return fmt.Errorf("dataLayer.injectDefaults: want a boolean, got %v", v)
		}
		inject = b
		delete(dl, "injectDefaults")
		a.changed = true
	}
	for _, k := range []string{"discovery", "peerDiscovery", "crossReplicaSyncerPluginRef", "crossReplicaSyncInterval"} {
		if v, ok := dl[k]; ok {
			delete(dl, k)
			a.changed = true
			a.logger.Info("dataLayer."+k+" is accepted but not used: pdgate discovers endpoints through Kubernetes or --endpoints-file and shares state across replicas through pd-token-ledger's Redis", "value", v)
		}
	}
	if !a.llmd || !inject {
		return nil
	}
	_, byName := a.plugins()
	sources, _ := dl["sources"].([]any)
	for _, s := range sources {
		if byName[pluginRefOf(s)] == sourcemetrics.MetricsDataSourceType || pluginRefOf(s) == sourcemetrics.MetricsDataSourceType {
			return nil
		}
	}
	srcName, extName := defaultSourceName, extractormetrics.MetricsExtractorType
	for byName[srcName] != "" {
		srcName = "pdgate-default-" + srcName
	}
	for byName[extName] != "" && byName[extName] != extractormetrics.MetricsExtractorType {
		extName = "pdgate-default-" + extName
	}
	a.addPlugin(srcName, sourcemetrics.MetricsDataSourceType)
	if byName[extName] == "" {
		a.addPlugin(extName, extractormetrics.MetricsExtractorType)
	}
	dl["sources"] = append(sources, map[string]any{"pluginRef": srcName, "extractors": []any{map[string]any{"pluginRef": extName}}})
	a.changed = true
	a.logger.V(1).Info("dataLayer: added llm-d's default metrics source next to the configured sources", "source", srcName, "extractor", extName)
	return nil
}
