package disaggheaders

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/internal/deprecation/deprecationtest"
)

// Each deprecated plugin type logs its deprecation once per process, however many instances.
func TestDeprecationLoggedOnce(t *testing.T) {
	r := deprecationtest.New()
	for i := 0; i < 3; i++ {
		if _, err := Factory("a", nil, r.Handle()); err != nil {
			t.Fatal(err)
		}
		if _, err := LegacyFactory("b", nil, r.Handle()); err != nil {
			t.Fatal(err)
		}
	}
	r.ExpectOnce(t, "Deprecated: disagg-headers-handler is deprecated", "Deprecated: prefill-header-handler is deprecated")
}
