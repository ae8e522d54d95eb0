package labelselector

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/internal/deprecation/deprecationtest"
)

// Each deprecated plugin type logs its deprecation once per process, however many instances.
func TestDeprecationLoggedOnce(t *testing.T) {
	r := deprecationtest.New()
	for i := 0; i < 3; i++ {
		if _, err := ByLabelFactory("a", []byte(`{"label":"x","allowsNoLabel":true}`), r.Handle()); err != nil {
			t.Fatal(err)
		}
		if _, err := LegacySelectorFactory("b", nil, r.Handle()); err != nil {
			t.Fatal(err)
		}
		if _, err := SelectorFactory("c", nil, r.Handle()); err != nil {
			t.Fatal(err)
		}
	}
	r.ExpectOnce(t, "Deprecated: by-label is deprecated", "Deprecated: by-label-selector is deprecated")
}
