package plugins

import (
	"encoding/json"
	"strings"
	"testing"
)

// ignoresParameters lists the types that accept any parameters because the llm-d plugins
// they stand in for document exactly that ("No parameters (ignored)"), so llm-d configs that
// carry stray keys keep loading.
var ignoresParameters = map[string]bool{
	"always-disagg-pd-decider":         true,
	"always-disagg-multimodal-decider": true,
}

// TestEveryFactoryDecodesParametersAlike is the table over every registered type: each one's
// parameters go through pluginkit.Decode, so
//   - absent, null, {} and " { } " all mean "the defaults": the four either all build a plugin
//     or all fail with the same error;
//   - an unknown field is an error naming the plugin type, the instance and the field (except
//     the types documented to ignore parameters, which accept it like {}).
func TestEveryFactoryDecodesParametersAlike(t *testing.T) {
	outcome := func(r registration, raw json.RawMessage) string {
		if _, err := r.factory("probe-instance", raw, nil); err != nil {
			return "error: " + err.Error()
		}
		return "ok"
	}
	for _, r := range registrations {
		t.Run(r.typeName, func(t *testing.T) {
			absent := outcome(r, nil)
			for _, raw := range []string{"null", "{}", " { } "} {
				if got := outcome(r, json.RawMessage(raw)); got != absent {
					t.Errorf("parameters %q: %s; absent parameters: %s", raw, got, absent)
				}
			}
			unknown := outcome(r, json.RawMessage(`{"noSuchParameter": 1}`))
			if ignoresParameters[r.typeName] {
				if unknown != absent {
					t.Errorf("documented to ignore parameters: unknown field gave %s, absent %s", unknown, absent)
				}
				return
			}
			for _, want := range []string{"error: ", r.typeName, `"probe-instance"`, "noSuchParameter"} {
				if !strings.Contains(unknown, want) {
					t.Errorf("unknown field: %s; must be an error naming the type, the instance and the field (missing %q)", unknown, want)
				}
			}
		})
	}
}

func TestTypeNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range TypeNames() {
		if seen[n] {
			t.Errorf("%s registered twice", n)
		}
		seen[n] = true
	}
}

func TestRegistrationsSortedByTypeName(t *testing.T) {
	for i := 1; i < len(registrations); i++ {
		if registrations[i-1].typeName >= registrations[i].typeName {
			t.Errorf("registrations not sorted by type name: %q before %q", registrations[i-1].typeName, registrations[i].typeName)
		}
	}
}
