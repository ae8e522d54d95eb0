package forecastadmitter

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/pdgate/pdgate/test/testsupport"
)

// Cost repeats the simulator's cost-profile types (cmd/sim/costmodel), which a plugin may not
// import, so that a profile pastes into the parameter as it is. Every profile under config/sim
// must therefore decode strictly into Cost, and DefaultCost must be the H100 profile's numbers.
func TestCostTakesTheSimulatorProfiles(t *testing.T) {
	var keys []string // Cost's top-level fields, as a profile names them
	for f := range reflect.TypeFor[Cost]().Fields() {
		keys = append(keys, strings.Split(f.Tag.Get("json"), ",")[0])
	}
	paths, err := filepath.Glob(filepath.Join(testsupport.RepoRoot(), "config/sim/llama3-*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no cost profiles: %v", err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			js, err := yaml.YAMLToJSON(b)
			if err != nil {
				t.Fatal(err)
			}
			var profile map[string]json.RawMessage
			if err := json.Unmarshal(js, &profile); err != nil {
				t.Fatal(err)
			}
			cost := map[string]json.RawMessage{}
			for _, k := range keys {
				v, ok := profile[k]
				if !ok {
					t.Fatalf("the profile has no %s", k)
				}
				cost[k] = v
			}
			raw, err := json.Marshal(map[string]any{"cost": cost})
			if err != nil {
				t.Fatal(err)
			}
			p, err := ParseParameters("f", raw)
			if err != nil {
				t.Fatalf("the profile's cost sections do not paste into the parameter: %v", err)
			}
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			if filepath.Base(path) == "llama3-8b-h100.yaml" && p.Cost != DefaultCost() {
				t.Errorf("DefaultCost is not the H100 profile:\n got %+v\nwant %+v", DefaultCost(), p.Cost)
			}
		})
	}
}
