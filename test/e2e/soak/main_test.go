// Package soak runs the default lab topology for $PDGATE_SOAK (default 60s; `make soak`
// sets 10m) at about 70 % of the throughput measured in the same run, with faults injected
// at random (seeded) through the simulator's x-sim-fault header, and reports the
// invariants: every request answered, only documented errors, latency within the gateway's
// bound, ledger gauges back to zero, goroutines and fds back to baseline, RSS over time.
package soak

import (
	"testing"

	"github.com/pdgate/pdgate/test/testsupport"
)

var binDir, repoRoot string

func TestMain(m *testing.M) {
	testsupport.Main(m, "soak-e2e", &binDir, &repoRoot, "sim", "sidecar", "epp", "gateway")
}
