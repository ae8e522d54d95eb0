package pluginset

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

// The prefix producer exists exactly when a configured plugin reads PrefixCacheMatchInfo:
// the disaggregation handlers and aibrix-pd-pair do not, so configs made only of them skip
// GIE's per-request block hashing and its index.
func TestResolveReferencesAddsPrefixProducerForReaders(t *testing.T) {
	RegisterAll()
	const head = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
	const decodeOnly = "schedulingProfiles:\n- name: decode\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: max-score-picker\n"
	tests := []struct {
		name, plugins string
		want          bool
	}{
		{"always-disagg handler", "plugins:\n- type: decode-filter\n- type: max-score-picker\n- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: always-disagg-pd-decider}}\n", false},
		{"prefix-based decider", "plugins:\n- type: decode-filter\n- type: max-score-picker\n- type: prefix-based-pd-decider\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: prefix-based-pd-decider}}\n", true},
		{"GIE prefix-cache-affinity filter alone", "plugins:\n- type: decode-filter\n- type: max-score-picker\n- type: prefix-cache-affinity-filter\n- type: single-profile-handler\n", true},
		{"aibrix-prefill-scorer", "plugins:\n- type: decode-filter\n- type: max-score-picker\n- type: aibrix-prefill-scorer\n- type: single-profile-handler\n", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, _, err := LoadRaw([]byte(head+tt.plugins+decodeOnly), logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			h := fwkplugin.NewEppHandle(context.Background(), func() []types.NamespacedName { return nil })
			if _, err := loader.InstantiateAndConfigure(raw, h, logr.Discard()); err != nil {
				t.Fatal(err)
			}
			if err := ResolveReferences(h); err != nil {
				t.Fatal(err)
			}
			got := false
			for _, p := range h.GetAllPlugins() {
				got = got || p.TypedName().Type == "approx-prefix-cache-producer"
			}
			if got != tt.want {
				t.Fatalf("approx-prefix-cache-producer present = %v, want %v", got, tt.want)
			}
		})
	}
}
