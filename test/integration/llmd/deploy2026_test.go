package llmd

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/pdgate/pdgate/cmd/epp/core"
	"github.com/pdgate/pdgate/cmd/epp/pluginset"
)

// llmdDeploy202608 lists every file of llm-d's scheduler deploy/config directory as of
// 2026-08 (llm-d-router ebab6879), mirrored under testdata/llmd-deploy-2026-08 with the plugin
// lists, parameters and top-level keys of the originals, and what each must load into.
var llmdDeploy202608 = map[string]struct {
	handler    string   // the profile handler instantiated
	saturation string   // the saturation detector GIE's admission uses ("" = not checked)
	gates      []string // feature gates on
	types      []string // plugin types that must be instantiated
	absent     []string // plugin types that must not be
}{
	"dp-epp-config.yaml": {handler: "data-parallel-profile-handler"},
	"epp-burst-prefix-cache-config.yaml": {handler: "single-profile-handler", types: []string{"burst-prefix-cache-producer", "load-aware-scorer"},
		absent: []string{"approx-prefix-cache-producer", "pdgate-prefix-cache-producer"}},
	"epp-config.yaml":                         {handler: "single-profile-handler"},
	"epp-estimate-prefix-cache-config.yaml":   {handler: "single-profile-handler", types: []string{"load-aware-scorer"}},
	"epp-mm-embeddings-cache-config.yaml":     {handler: "single-profile-handler", types: []string{"mm-embeddings-cache-producer", "mm-embeddings-cache-scorer"}},
	"epp-precise-prefix-cache-config.yaml":    {handler: "single-profile-handler"},
	"pd-epp-config.yaml":                      {handler: "disagg-profile-handler"},
	"pd-topology-epp-config.yaml":             {handler: "disagg-profile-handler", types: []string{"topology-extractor", "topology-affinity-filter", "topology-affinity-scorer"}},
	"probabilistic-admitter-epp-config.yaml":  {handler: "single-profile-handler", saturation: "utilization-detector", types: []string{"probabilistic-admitter"}},
	"sim-e-p-d-epp-config.yaml":               {handler: "disagg-profile-handler"},
	"sim-e-pd-epp-config.yaml":                {handler: "disagg-profile-handler"},
	"sim-epp-config.yaml":                     {handler: "single-profile-handler"},
	"sim-epp-gpu-config.yaml":                 {handler: "single-profile-handler", types: []string{"dcgm-data-source", "dcgm-extractor", "endpoint-attribute-filter", "endpoint-attribute-scorer", "metrics-data-source"}},
	"sim-epp-kvcache-config.yaml":             {handler: "single-profile-handler"},
	"sim-epp-no-hit-lru.yaml":                 {handler: "single-profile-handler", types: []string{"no-hit-lru-scorer"}},
	"sim-epp-tokenizer-vllm-http-config.yaml": {handler: "single-profile-handler"},
	"sim-pd-epp-config.yaml":                  {handler: "disagg-profile-handler"},
	"sim-program-aware-config.yaml":           {handler: "single-profile-handler", gates: []string{"flowControl"}, types: []string{"program-aware-fairness"}},
	"soft-reflective-ceiling-epp-config.yaml": {handler: "single-profile-handler", gates: []string{"flowControl"}, types: []string{"soft-reflective-ceiling-policy"}},
}

// TestLLMDDeployConfigs2026_08 builds every file through cmd/epp/core.New, the one
// constructor bin/epp, pdgate validate and the benchmarks use.
func TestLLMDDeployConfigs2026_08(t *testing.T) {
	files, err := filepath.Glob("testdata/llmd-deploy-2026-08/*.yaml")
	if err != nil || len(files) != len(llmdDeploy202608) {
		t.Fatalf("%d files (%v), want %d", len(files), err, len(llmdDeploy202608))
	}
	pluginset.RegisterAll()
	for _, f := range files {
		name := filepath.Base(f)
		want, ok := llmdDeploy202608[name]
		if !ok {
			t.Errorf("%s is not in the expectation table", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			c := buildConfigFile(t, f)
			types := map[string]bool{}
			for _, p := range c.Handle.GetAllPlugins() {
				types[p.TypedName().Type] = true
			}
			if !types[want.handler] {
				t.Errorf("profile handler %s not instantiated (have %v)", want.handler, types)
			}
			for _, typ := range want.types {
				if !types[typ] {
					t.Errorf("plugin type %s not instantiated", typ)
				}
			}
			for _, typ := range want.absent {
				if types[typ] {
					t.Errorf("plugin type %s instantiated; it must not be", typ)
				}
			}
			for _, g := range want.gates {
				if !c.Gates[g] {
					t.Errorf("feature gate %s is off", g)
				}
			}
			if want.saturation != "" && (c.Raw.SaturationDetector == nil || c.Raw.SaturationDetector.PluginRef != want.saturation) {
				t.Errorf("saturation detector %v, want %s", c.Raw.SaturationDetector, want.saturation)
			}
		})
	}
}

// buildConfigFile builds one EndpointPickerConfig file through cmd/epp/core.New, the one
// constructor bin/epp, pdgate validate and the benchmarks use; its plugins run until the test
// ends.
func buildConfigFile(t *testing.T, file string) *core.Core {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c, err := core.New(ctx, core.Options{Config: data, Validate: true})
	if err != nil {
		t.Fatalf("core.New(%s): %v", file, err)
	}
	return c
}
