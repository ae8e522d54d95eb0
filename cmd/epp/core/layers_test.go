package core

import (
	"context"
	"strings"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

// precise-prefix-cache-producer with precise-prefix-cache-scorer (the scorer bound to the
// producer consumes its PrecisePrefixCacheMatchInfo) used to panic in GIE's dependency check:
// the declared MatchInfo held a map and GIE compares declarations with !=.
const preciseProducerAndScorer = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: decode-filter
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig: {blockSizeTokens: 16}
    kvEventsConfig: {zmqEndpoint: "tcp://127.0.0.1:0"}
- type: precise-prefix-cache-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: precise-prefix-cache-scorer
  - pluginRef: max-score-picker
`

func TestPreciseProducerWithScorerValidates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := New(ctx, Options{Config: []byte(preciseProducerAndScorer), Validate: true}); err != nil {
		t.Fatalf("New: %v", err)
	}
}

type declaring struct {
	produces, consumes map[string]any
}

func (d declaring) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "test-plugin", Name: "mine"}
}
func (d declaring) Produces() map[string]any { return d.produces }
func (d declaring) Consumes() map[string]any { return d.consumes }

type withMap struct{ Counts map[string]int }

func TestUncomparableDeclarationsAreRefusedByName(t *testing.T) {
	tests := []struct {
		name    string
		p       declaring
		wantErr string
	}{
		{"comparable values", declaring{produces: map[string]any{"k": (*withMap)(nil)}, consumes: map[string]any{"k": (*withMap)(nil)}}, ""},
		{"a map-holding struct only one side declares is never compared", declaring{produces: map[string]any{"k": withMap{}}, consumes: map[string]any{"j": withMap{}}}, ""},
		{"a produced map-holding struct someone consumes", declaring{produces: map[string]any{"k": withMap{}}, consumes: map[string]any{"k": (*withMap)(nil)}}, `plugin mine/test-plugin declares data key "k"`},
		{"a consumed map-holding struct someone produces", declaring{produces: map[string]any{"j": (*withMap)(nil)}, consumes: map[string]any{"j": withMap{}}}, `plugin mine/test-plugin declares data key "j"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := checkComparableDeclarations([]fwkplugin.Plugin{tc.p})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}
