// Package soak runs the default lab topology for $PDGATE_SOAK (default 60s; `make soak`
// sets 10m) at about 70 % of the throughput measured in the same run, with faults injected
// at random (seeded) through the simulator's x-sim-fault header, and reports the
// invariants: every request answered, only documented errors, latency within the gateway's
// bound, ledger gauges back to zero, goroutines and fds back to baseline, RSS over time.
package soak

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

var binDir, repoRoot string

func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	repoRoot, _ = filepath.Abs(filepath.Join(filepath.Dir(file), "..", "..", ".."))
	if dir := os.Getenv("PDGATE_BIN_DIR"); dir != "" {
		binDir, _ = filepath.Abs(dir)
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "pdgate-soak-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "./cmd/sim", "./cmd/sidecar", "./cmd/epp", "./cmd/gateway")
	cmd.Dir = repoRoot
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building binaries:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
