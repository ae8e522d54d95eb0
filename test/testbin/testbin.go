// Package testbin gives the process-level test suites the pdgate binaries they start: the
// ones `make build` produced (PDGATE_BIN_DIR, as the Makefile passes it), or a fresh build
// into a temporary directory when a suite runs on its own with `go test`.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// RepoRoot is the repository's root directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	root, _ := filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
	return root
}

// Main runs a suite's tests with *binDir set to a directory holding the named binaries
// (e.g. "sim", "sidecar", "epp", "gateway") and *repoRoot to the repository root, then exits
// with the tests' status. Call it from TestMain.
func Main(m *testing.M, suite string, binDir, repoRoot *string, binaries ...string) {
	*repoRoot = RepoRoot()
	if dir := os.Getenv("PDGATE_BIN_DIR"); dir != "" {
		*binDir, _ = filepath.Abs(dir)
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "pdgate-"+suite)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*binDir = dir
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, b := range binaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = *repoRoot
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building binaries:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}
