package pluginset

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"

	"github.com/pdgate/pdgate/plugins/datalayer/prefixproducer"
	"github.com/pdgate/pdgate/plugins/datalayer/tokenproducer"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

// A default producer exists exactly when a configured plugin reads its key: the
// disaggregation handlers and aibrix-pd-pair read neither, so configs made only of them skip
// GIE's per-request block hashing and its index. Declared producers are kept, wherever they
// are declared, and prefix-cache-scorer's producer parameters apply even when the scorer
// comes after the decider.
func TestResolveReferencesAddsDefaultProducers(t *testing.T) {
	RegisterAll()
	const head = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
	const decodeOnly = "schedulingProfiles:\n- name: decode\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: max-score-picker\n"
	const handler = "- type: disagg-profile-handler\n  parameters: {deciders: {prefill: prefix-based-pd-decider}}\n"
	tests := []struct {
		name, plugins         string
		prefix, tokens        int
		prefixType            string // the prefix producer's type, "" = none
		prefixBlockSizeTokens int    // of the producer, 0 = not checked
	}{
		{"always-disagg handler", "plugins:\n- type: decode-filter\n- type: max-score-picker\n- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: always-disagg-pd-decider}}\n", 0, 0, "", 0},
		{"prefix-based decider", "plugins:\n- type: decode-filter\n- type: max-score-picker\n- type: prefix-based-pd-decider\n" + handler, 1, 1, prefixproducer.Type, defaultBlockSizeTokens},
		{"declared producers after the decider are the only ones", "plugins:\n- type: decode-filter\n- type: max-score-picker\n- type: prefix-based-pd-decider\n" + handler +
			"- type: token-producer\n- type: approx-prefix-cache-producer\n  parameters: {autoTune: false, blockSizeTokens: 32}\n", 1, 1, approximateprefix.ApproxPrefixCachePluginType, 32},
		{"declared pdgate producer is the only one", "plugins:\n- type: decode-filter\n- type: max-score-picker\n- type: prefix-based-pd-decider\n" + handler +
			"- type: pdgate-prefix-cache-producer\n  parameters: {autoTune: false, blockSizeTokens: 24}\n", 1, 1, prefixproducer.Type, 24},
		{"prefix-cache-scorer after the decider keeps its parameters", "plugins:\n- type: decode-filter\n- type: max-score-picker\n- type: prefix-based-pd-decider\n" + handler +
			"- type: prefix-cache-scorer\n  parameters: {autoTune: false, blockSizeTokens: 48}\n", 1, 1, approximateprefix.ApproxPrefixCachePluginType, 48},
		{"GIE prefix-cache-affinity filter alone", "plugins:\n- type: decode-filter\n- type: max-score-picker\n- type: prefix-cache-affinity-filter\n- type: single-profile-handler\n", 1, 0, prefixproducer.Type, 0},
		{"aibrix-prefill-scorer", "plugins:\n- type: decode-filter\n- type: max-score-picker\n- type: aibrix-prefill-scorer\n- type: single-profile-handler\n", 1, 0, prefixproducer.Type, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, _, err := LoadRaw([]byte(head+tt.plugins+decodeOnly), logr.Discard())
			if err != nil {
				t.Fatal(err)
			}
			h := plugintest.Handle(context.Background())
			if _, err := loader.InstantiateAndConfigure(raw, h, logr.Discard()); err != nil {
				t.Fatal(err)
			}
			if err := ResolveReferences(h); err != nil {
				t.Fatal(err)
			}
			prefix, tokens := 0, 0
			for _, p := range h.GetAllPlugins() {
				switch p.TypedName().Type {
				case approximateprefix.ApproxPrefixCachePluginType, prefixproducer.Type:
					prefix++
					if p.TypedName().Type != tt.prefixType {
						t.Errorf("prefix producer %s, want %s", p.TypedName(), tt.prefixType)
					}
					if tt.prefixBlockSizeTokens != 0 {
						if got := blockSizeTokens(t, p); got != tt.prefixBlockSizeTokens {
							t.Errorf("producer blockSizeTokens %d, want %d (the declared parameters)", got, tt.prefixBlockSizeTokens)
						}
					}
				case tokenproducer.Type:
					tokens++
				}
			}
			if prefix != tt.prefix || tokens != tt.tokens {
				t.Fatalf("prefix producers %d, token-producer %d; want %d, %d", prefix, tokens, tt.prefix, tt.tokens)
			}
		})
	}
}

// defaultBlockSizeTokens is GIE's default block size, the auto-added producer's.
const defaultBlockSizeTokens = prefixproducer.DefaultBlockSizeTokens

// blockSizeTokens reads a prefix producer's configured block size (no endpoints: no auto-tune).
func blockSizeTokens(t *testing.T, p fwkplugin.Plugin) int {
	t.Helper()
	if pp, ok := p.(*prefixproducer.Producer); ok {
		return pp.BlockSize(nil)
	}
	b, ok := p.(interface {
		GetBlockSize([]fwksched.Endpoint) int
	})
	if !ok {
		t.Fatalf("%T has no GetBlockSize", p)
	}
	return b.GetBlockSize(nil)
}

// ensurePrefixProducer adds one pdgate-prefix-cache-producer and is idempotent.
func TestEnsurePrefixProducerOnce(t *testing.T) {
	h := plugintest.Handle(context.Background())
	count := func() int {
		n := 0
		for _, p := range h.GetAllPlugins() {
			if p.TypedName().Type == prefixproducer.Type {
				n++
			}
		}
		return n
	}
	ensurePrefixProducer(h)
	ensurePrefixProducer(h)
	if got := count(); got != 1 {
		t.Fatalf("%d pdgate-prefix-cache-producers after two calls, want 1", got)
	}
}
