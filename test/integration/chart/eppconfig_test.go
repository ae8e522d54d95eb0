package chart

import (
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/epp/core"
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

// loadLikeEPP builds the config with the EPP's own constructor (what `pdgate validate` runs).
func loadLikeEPP(text string) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := core.New(ctx, core.Options{Config: []byte(text), Validate: true})
	return err
}
