package pluginset

import (
	"strings"
	"testing"

	"github.com/go-logr/logr"
	configapi "sigs.k8s.io/gateway-api-inference-extension/apix/config/v1alpha1"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestLoadRawLLMDSchema(t *testing.T) {
	head := "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n- type: utilization-detector\n"
	tests := []struct {
		name, doc, wantErr string
		check              func(t *testing.T, c loaded)
	}{
		{name: "flowControl.saturationDetector moves to GIE's key",
			doc: head + "flowControl:\n  saturationDetector:\n    pluginRef: utilization-detector\n",
			check: func(t *testing.T, c loaded) {
				if c.raw.SaturationDetector == nil || c.raw.SaturationDetector.PluginRef != "utilization-detector" {
					t.Fatalf("saturationDetector %v", c.raw.SaturationDetector)
				}
			}},
		{name: "the two detector keys disagreeing is an error",
			doc:     head + "saturationDetector:\n  pluginRef: other\nflowControl:\n  saturationDetector:\n    pluginRef: utilization-detector\n",
			wantErr: `flowControl.saturationDetector.pluginRef "utilization-detector" and saturationDetector.pluginRef "other"`},
		{name: "name=value gates and llm-d's HA gate",
			doc: head + "featureGates: [flowControl=TRUE, haPopulateNonLeaderDatastore, dataLayer=false]\n",
			check: func(t *testing.T, c loaded) {
				if !c.gates["flowControl"] || c.gates["dataLayer"] {
					t.Fatalf("gates %v", c.gates)
				}
			}},
		{name: "a gate value that is not a boolean",
			doc: head + "featureGates: [flowControl=maybe]\n", wantErr: `featureGates[0] "flowControl=maybe"`},
		{name: "llm-d's flow-control keys GIE lacks are accepted; llm-d's 60s TTL default",
			doc: head + "featureGates: [flowControl]\nflowControl:\n  noEndpointRequestTTL: 5s\n  enableEviction: true\n  defaultNegativePriorityBand:\n    maxRequests: 10\n  defaultPriorityBand:\n    fairnessPolicyRef: round-robin-fairness-policy\n",
			check: func(t *testing.T, c loaded) {
				fc := c.raw.FlowControl
				if fc == nil || fc.DefaultRequestTTL == nil || fc.DefaultRequestTTL.Duration.String() != "1m0s" {
					t.Fatalf("flowControl %v", fc)
				}
				if fc.DefaultPriorityBand == nil || fc.DefaultPriorityBand.FairnessPolicyRef != "round-robin-fairness-policy" {
					t.Fatalf("defaultPriorityBand %v", fc.DefaultPriorityBand)
				}
			}},
		{name: "GIE's apiVersion keeps GIE's TTL default",
			doc: strings.Replace(head, "llm-d.ai/v1alpha1", "inference.networking.x-k8s.io/v1alpha1", 1) + "featureGates: [flowControl]\nflowControl:\n  usageLimitPolicyPluginRef: x\n",
			check: func(t *testing.T, c loaded) {
				if c.raw.FlowControl.DefaultRequestTTL != nil || c.raw.FlowControl.UsageLimitPolicyPluginRef != "x" {
					t.Fatalf("flowControl %v", c.raw.FlowControl)
				}
			}},
		{name: "requestHandler.parsers: the first is GIE's parser, declared if bare",
			doc: head + "requestHandler:\n  parsers:\n  - pluginRef: openai-parser\n  - pluginRef: anthropic-parser\n",
			check: func(t *testing.T, c loaded) {
				if c.raw.Parser == nil || c.raw.Parser.PluginRef != "openai-parser" {
					t.Fatalf("parser %v", c.raw.Parser)
				}
				found := false
				for _, p := range c.raw.Plugins {
					found = found || (p.Name == "openai-parser" && p.Type == "openai-parser")
				}
				if !found {
					t.Fatal("openai-parser not declared")
				}
			}},
		{name: "explicit dataLayer gets llm-d's additive metrics source",
			doc: head + "- type: endpoint-notification-source\ndataLayer:\n  crossReplicaSyncInterval: 1s\n  sources:\n  - pluginRef: endpoint-notification-source\n",
			check: func(t *testing.T, c loaded) {
				if n := len(c.raw.DataLayer.Sources); n != 2 || c.raw.DataLayer.Sources[1].PluginRef != "metrics-data-source" ||
					c.raw.DataLayer.Sources[1].Extractors[0].PluginRef != "core-metrics-extractor" {
					t.Fatalf("sources %v", c.raw.DataLayer.Sources)
				}
			}},
		{name: "injectDefaults false keeps the explicit dataLayer",
			doc: head + "- type: endpoint-notification-source\ndataLayer:\n  injectDefaults: false\n  sources:\n  - pluginRef: endpoint-notification-source\n",
			check: func(t *testing.T, c loaded) {
				if n := len(c.raw.DataLayer.Sources); n != 1 {
					t.Fatalf("sources %v", c.raw.DataLayer.Sources)
				}
			}},
		{name: "llm-d.ai/v1 is accepted",
			doc: strings.Replace(head, "v1alpha1", "v1", 1)},
		{name: "a document without llm-d keys is untouched",
			doc: head + "saturationDetector:\n  pluginRef: utilization-detector\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, gates, err := LoadRaw([]byte(tt.doc), logr.Discard())
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if tt.check != nil {
				tt.check(t, loaded{raw: raw, gates: gates})
			}
		})
	}
}

func TestAdaptSchemaLeavesPlainDocumentsAlone(t *testing.T) {
	doc := []byte("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n# a comment\nplugins:\n- type: queue-scorer\n")
	out, err := adaptSchema(doc, false, logr.Discard())
	if err != nil || string(out) != string(doc) {
		t.Fatalf("changed: %q %v", out, err)
	}
}

type loaded struct {
	raw   *configapi.EndpointPickerConfig
	gates map[string]bool
}
