package labelselector

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/internal/deprecation/deprecationtest"
)

// Each deprecated plugin type logs its deprecation once per process, however many instances.
func TestDeprecationLoggedOnce(t *testing.T) {
	deprecationtest.LoggedOnce(t, []deprecationtest.Build{
		{Factory: ByLabelFactory, Params: `{"label":"x","allowsNoLabel":true}`},
		{Factory: LegacySelectorFactory},
		{Factory: SelectorFactory},
	}, "Deprecated: by-label is deprecated", "Deprecated: by-label-selector is deprecated")
}
