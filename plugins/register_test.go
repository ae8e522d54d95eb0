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

// Every other pdgate plugin decodes its parameters strictly: a misspelt or stale field is an
// error naming the plugin (its type or its configured name) and the field, or saying that
// the type takes no parameters, never a silently ignored setting.
func TestEveryFactoryRejectsUnknownParameters(t *testing.T) {
	for _, r := range registrations {
		t.Run(r.typeName, func(t *testing.T) {
			_, err := r.factory("probe-instance", json.RawMessage(`{"noSuchParameter": 1}`), nil)
			if ignoresParameters[r.typeName] {
				if err != nil {
					t.Fatalf("documented to ignore parameters, got %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("an unknown parameter was accepted")
			}
			msg := err.Error()
			namesPlugin := strings.Contains(msg, r.typeName) || strings.Contains(msg, "probe-instance")
			namesField := strings.Contains(msg, "noSuchParameter") || strings.Contains(msg, "takes no parameters")
			if !namesPlugin || !namesField {
				t.Errorf("error %q must name the plugin (type %q or name) and the field", msg, r.typeName)
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
