package tokenproducer

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/internal/deprecation/deprecationtest"
)

// Each deprecated plugin type logs its deprecation once per process, however many instances.
func TestDeprecationLoggedOnce(t *testing.T) {
	deprecationtest.LoggedOnce(t, []deprecationtest.Build{{Factory: LegacyFactory}}, "Deprecated: plugin type 'tokenizer' is deprecated")
}
