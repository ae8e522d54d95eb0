package disaggprofile

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/internal/deprecation/deprecationtest"
)

// Each deprecated plugin type logs its deprecation once per process, however many instances.
func TestDeprecationLoggedOnce(t *testing.T) {
	r := deprecationtest.New()
	for i := 0; i < 3; i++ {
		if _, err := PDHandlerFactory("pd", nil, r.Handle()); err != nil {
			t.Fatal(err)
		}
	}
	r.ExpectOnce(t, "Deprecated: pd-profile-handler is deprecated")
}
