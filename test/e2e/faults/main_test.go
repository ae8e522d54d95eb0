// Package faults is the fault matrix: a lab-shaped deployment (simulators, sidecars, the EPP
// in standalone mode, the dev gateway; real processes on loopback) under a bounded load while
// one fault is injected, then the invariants every case must keep: nothing lost, nothing
// outlives its timeouts, ledger gauges back to zero, goroutines and fds back to baseline.
package faults

import (
	"testing"

	"github.com/pdgate/pdgate/test/testsupport"
)

var (
	binDir   string
	repoRoot string
)

// TestMain builds the four binaries once into a temporary directory (PDGATE_BIN_DIR skips
// the build and uses binaries built elsewhere, e.g. bin/ after `make build`).
func TestMain(m *testing.M) {
	testsupport.Main(m, "faults-e2e", &binDir, &repoRoot, "sim", "sidecar", "epp", "gateway")
}
