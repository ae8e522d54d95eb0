package disaggprofile

import (
	"context"
	"encoding/json"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func hasPrefixProducer(h fwkplugin.Handle) bool {
	for _, p := range h.GetAllPlugins() {
		if p.TypedName().Type == approximateprefix.ApproxPrefixCachePluginType {
			return true
		}
	}
	return false
}

// The handlers leave the prefix producer to the plugins that read its data: with
// always-disagg or aibrix-pd-pair as deciders it would only cost CPU and memory.
func TestHandlersDoNotCreatePrefixProducer(t *testing.T) {
	for _, tt := range []struct {
		name    string
		factory fwkplugin.FactoryFunc
		params  string
	}{
		{"disagg-profile-handler", HandlerFactory, `{"deciders":{"prefill":"d"}}`},
		{"pd-profile-handler", PDHandlerFactory, ``},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := plugintest.Handle(context.Background())
			if _, err := tt.factory("h", json.RawMessage(tt.params), h); err != nil {
				t.Fatal(err)
			}
			if hasPrefixProducer(h) {
				t.Fatal("the handler created an approx-prefix-cache-producer")
			}
		})
	}
}
