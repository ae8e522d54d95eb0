// Package validatetest runs the option-validation tables of the commands: each case changes
// the defaults and names the error Validate must give (plugintest.WantErr's rule: "" wants no
// error, any other text an error that holds it, usually the flag at fault).
package validatetest

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

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
			plugintest.WantErr(t, P(&o).Validate(), c.Want)
		})
	}
}
