package llmd

import (
	"path/filepath"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

	"github.com/pdgate/pdgate/cmd/epp/pluginset"
)

// TestLLMDPreciseConfigs2026_05 loads llm-d's May 2026 precise-prefix wiring through
// cmd/epp/core.New (what bin/epp and pdgate validate run): precise-prefix-cache-scorer as the
// extractor of endpoint-notification-source, once as llm-d documented it and once with an
// approx-prefix-cache-producer key misplaced under its kvBlockIndexConfig. Both failed to load
// before: "endpoint-notification-source is not a fwkdl.Extractor" and "unknown field".
func TestLLMDPreciseConfigs2026_05(t *testing.T) {
	files, err := filepath.Glob("testdata/llmd-2026-05/*.yaml")
	if err != nil || len(files) != 2 {
		t.Fatalf("%d files (%v), want 2", len(files), err)
	}
	pluginset.RegisterAll()
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			c := buildConfigFile(t, f)
			scorer := c.Handle.Plugin("precise-prefix-cache-scorer")
			if scorer == nil {
				t.Fatal("precise-prefix-cache-scorer not instantiated")
			}
			if _, ok := scorer.(fwkdl.EndpointExtractor); !ok {
				t.Fatal("precise-prefix-cache-scorer is no endpoint extractor")
			}
			if c.Raw.DataLayer == nil || len(c.Raw.DataLayer.Sources) != 1 || len(c.Raw.DataLayer.Sources[0].Extractors) != 1 ||
				c.Raw.DataLayer.Sources[0].Extractors[0].PluginRef != "precise-prefix-cache-scorer" {
				t.Fatalf("data layer %+v: want endpoint-notification-source → precise-prefix-cache-scorer", c.Raw.DataLayer)
			}
		})
	}
}
