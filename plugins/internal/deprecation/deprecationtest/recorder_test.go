package deprecationtest

import (
	"fmt"
	"testing"

	"github.com/pdgate/pdgate/plugins/internal/deprecation"
)

// fakeTB records failures instead of failing the real test, so ExpectOnce's verdicts can be
// checked both ways.
type fakeTB struct {
	testing.TB
	errors []string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func TestRecorderCountsNoticesPerProcess(t *testing.T) {
	r := New()
	for i := 0; i < 3; i++ {
		deprecation.Once(r.Handle().Context(), "old-type", "Deprecated: old-type, use new-type")
	}
	r.ExpectOnce(t, "Deprecated: old-type")

	missing := &fakeTB{TB: t}
	r.ExpectOnce(missing, "never logged")
	if len(missing.errors) != 1 {
		t.Errorf("a notice never logged must fail ExpectOnce, got %v", missing.errors)
	}

	// New resets the process-wide memory: the same notice is logged again, once.
	r2 := New()
	deprecation.Once(r2.Handle().Context(), "old-type", "Deprecated: old-type, use new-type")
	deprecation.Once(r2.Handle().Context(), "old-type", "Deprecated: old-type, use new-type")
	r2.ExpectOnce(t, "Deprecated: old-type")
}
