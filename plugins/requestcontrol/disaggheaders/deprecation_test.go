package disaggheaders

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/internal/deprecation/deprecationtest"
)

// Each deprecated plugin type logs its deprecation once per process, however many instances.
func TestDeprecationLoggedOnce(t *testing.T) {
	deprecationtest.LoggedOnce(t, []deprecationtest.Build{{Factory: Factory}, {Factory: LegacyFactory}},
		"Deprecated: disagg-headers-handler is deprecated", "Deprecated: prefill-header-handler is deprecated")
}
