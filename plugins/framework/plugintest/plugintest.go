// Package plugintest holds what the plugins' table-driven tests check the same way: an
// expected configuration error. Only test files import it.
package plugintest

import (
	"strings"
	"testing"
)

// WantErr fails t at once unless err fits want: "" wants no error; any other text wants an
// error that contains it and every one of naming (the plugin type or instance it must name).
// It reports whether an error was wanted, so the caller then has nothing more to check.
func WantErr(t testing.TB, err error, want string, naming ...string) (wanted bool) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Fatalf("unexpected error: %v", err)
	case want == "":
	case err == nil:
		t.Fatalf("no error, want one naming %q", append([]string{want}, naming...))
	default:
		for _, w := range append([]string{want}, naming...) {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("error %v, want one naming %q", err, w)
			}
		}
	}
	return want != ""
}
