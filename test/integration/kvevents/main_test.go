// Package kvevents drives precise prefix caching end to end with real processes: simulators
// (cmd/sim) publishing KV-cache events over real ZeroMQ, and the real EPP binary (cmd/epp, in
// standalone mode) subscribing to them, deciding P/D and answering the 412 gate on them.
package kvevents

import (
	"path/filepath"
	"testing"

	"github.com/pdgate/pdgate/test/testsupport"
)

var binDir string

func TestMain(m *testing.M) { testsupport.Main(m, "kvevents", &binDir, nil, "epp", "sim") }

func bin(name string) string { return filepath.Join(binDir, name) }
