package benchepp

import (
	"testing"

	"github.com/pdgate/pdgate/test/testsupport"
)

// binDir holds epp and pdgate-bench (make build's bin/ via PDGATE_BIN_DIR, or a fresh build); the
// harness builds stock GIE's EPP into it as gie-epp when missing.
var binDir, root string

func TestMain(m *testing.M) { testsupport.Main(m, "benchepp", &binDir, &root, "epp", "pdgate-bench") }
