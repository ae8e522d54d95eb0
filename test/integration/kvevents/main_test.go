// Package kvevents drives precise prefix caching end to end with real processes: simulators
// (cmd/sim) publishing KV-cache events over real ZeroMQ, and the real EPP binary (cmd/epp, in
// standalone mode) subscribing to them, deciding P/D and answering the 412 gate on them.
package kvevents

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/pdgate/pdgate/test/testsupport"
)

var binDir string

func TestMain(m *testing.M) {
	dir, cleanup, err := testsupport.Binaries("kvevents", "epp", "sim")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	cleanup()
	os.Exit(code)
}

func bin(name string) string { return filepath.Join(binDir, name) }
