// Package validatetest checks the errors table-driven tests expect, the same way in every
// command: an empty expectation wants no error, any other wants an error whose text holds it
// (usually the flag at fault).
package validatetest

import (
	"strings"
	"testing"
)

// Err fails t at once unless err fits want, and reports whether an error was wanted: the
// caller then has nothing more to check.
func Err(t testing.TB, err error, want string) (wanted bool) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return false
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("error %v, want one naming %q", err, want)
	}
	return true
}

// Case is one change to a command's default options and what validation must say of it.
type Case[O any] struct {
	Name   string
	Change func(*O)
	Want   string // "" = valid
}

// Options runs every case's change on a fresh copy of defaults and checks its Validate.
func Options[O any, P interface {
	*O
	Validate() error
}](t *testing.T, defaults O, cases []Case[O]) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			o := defaults
			c.Change(&o)
			Err(t, P(&o).Validate(), c.Want)
		})
	}
}
