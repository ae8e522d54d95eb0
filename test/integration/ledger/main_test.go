package ledger

import (
	"path/filepath"
	"testing"

	"github.com/pdgate/pdgate/test/testsupport"
)

// binDir holds the real cmd/epp binary for the two-replica test: make build's (PDGATE_BIN_DIR),
// or built once for a standalone `go test`.
var binDir string

func TestMain(m *testing.M) { testsupport.Main(m, "ledger", &binDir, nil, "epp") }

func eppBin() string { return filepath.Join(binDir, "epp") }
