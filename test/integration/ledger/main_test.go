package ledger

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/pdgate/pdgate/test/testsupport"
)

// eppBin is the real cmd/epp binary for the two-replica test: make build's (PDGATE_BIN_DIR),
// or built once for a standalone `go test`.
var eppBin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, cleanup, err := testsupport.Binaries("ledger", "epp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	eppBin = filepath.Join(dir, "epp")
	return m.Run()
}
