// Package faults is the fault matrix: a lab-shaped deployment (simulators, sidecars, the EPP
// in standalone mode, the dev gateway; real processes on loopback) under a bounded load while
// one fault is injected, then the invariants every case must keep: nothing lost, nothing
// outlives its timeouts, ledger gauges back to zero, goroutines and fds back to baseline.
package faults

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

var (
	binDir   string
	repoRoot string
)

// TestMain builds the four binaries once into a temporary directory (PDGATE_BIN_DIR skips
// the build and uses binaries built elsewhere, e.g. bin/ after `make build`).
func TestMain(m *testing.M) {
	_, file, _, _ := runtime.Caller(0)
	repoRoot, _ = filepath.Abs(filepath.Join(filepath.Dir(file), "..", "..", ".."))
	if dir := os.Getenv("PDGATE_BIN_DIR"); dir != "" {
		binDir, _ = filepath.Abs(dir)
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "pdgate-faults-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, b := range []string{"sim", "sidecar", "epp", "gateway"} {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.Command("go", args...)
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
