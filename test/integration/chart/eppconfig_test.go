package chart

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/cmd/epp/pluginset"
)

// TestEPPLoadsShippedConfigs loads every EndpointPickerConfig the chart's ConfigMap can hold
// (rendered and shipped, for every values file) the way the EPP does: GIE's in-tree plugins
// plus pdgate's registered, strict decoding, instantiation, validation, the data DAG.
func TestEPPLoadsShippedConfigs(t *testing.T) {
	configs := map[string]string{} // "<values file>/<config file>" -> text
	for _, f := range sampleFiles(t) {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		cm := find(t, mustRender(t, name, testNS, values(t, []string{f})), "ConfigMap", name+"-epp")
		for k, v := range field(t, cm, "data").(map[string]any) {
			configs[name+"/"+k] = v.(string)
		}
	}
	keys := make([]string, 0, len(configs))
	for k := range configs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Run(k, func(t *testing.T) {
			if err := loadLikeEPP(configs[k]); err != nil {
				t.Fatalf("the EPP would not start with %s: %v\n%s", k, err, configs[k])
			}
		})
	}
}

func loadLikeEPP(text string) error {
	logger := logr.Discard()
	raw, _, err := pluginset.LoadRaw([]byte(text), logger)
	if err != nil {
		return err
	}
	handle := fwkplugin.NewEppHandle(context.Background(), func() []types.NamespacedName { return nil })
	if _, err := loader.InstantiateAndConfigure(raw, handle, logger); err != nil {
		return err
	}
	_, err = datalayer.ValidateAndOrderDataDependencies(handle.GetAllPlugins())
	return err
}
