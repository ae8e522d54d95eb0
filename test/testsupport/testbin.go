// Package testsupport holds what pdgate's test suites share instead of copying: the binaries the
// process-level suites start (the ones `make build` produced, PDGATE_BIN_DIR as the Makefile
// passes it, or a fresh build into a temporary directory when a suite runs on its own with
// `go test`) and their TestMain (Main, BuiltBinaries), processes started for a test (Run,
// Start, and StartProc for one the test kills and restarts), free ports (FreePort), polling
// (Eventually), HTTP/JSON requests (PostJSON, ChatBody, Do, Outcome), /metrics samples
// (MetricSample), fake vLLM metrics pages (VLLMMetrics) and the benchmarks' process CPU time
// (ProcessCPU, and LoopCPU for a b.Loop measured in it);
// test/testsupport/eptest builds the endpoints unit tests use, kubetest the envtest suites'
// control plane, labtest their labs, eppclient their ext_proc requests and redistest the
// redis-server of the shared decode ledger.
package testsupport

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
// (e.g. "sim", "sidecar", "epp", "gateway") and *repoRoot to the repository root (a nil
// repoRoot: the suite needs none), then exits with the tests' status. Call it from TestMain.
func Main(m *testing.M, suite string, binDir, repoRoot *string, binaries ...string) {
	if repoRoot != nil {
		*repoRoot = RepoRoot()
	}
	dir, cleanup, err := Binaries(suite, binaries...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*binDir = dir
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// Binaries returns a directory holding the named binaries: PDGATE_BIN_DIR when set (cleanup
// does nothing), else a temporary directory they are built into (cleanup removes it). For
// suites whose TestMain does more than Main.
func Binaries(suite string, binaries ...string) (dir string, cleanup func(), err error) {
	if d := os.Getenv("PDGATE_BIN_DIR"); d != "" {
		dir, err = filepath.Abs(d)
		return dir, func() {}, err
	}
	dir, err = os.MkdirTemp("", "pdgate-"+suite)
	if err != nil {
		return "", nil, err
	}
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	for _, b := range binaries {
		args = append(args, "./cmd/"+b)
	}
	cmd := exec.Command("go", args...)
	cmd.Dir = RepoRoot()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("building %v: %w", binaries, err)
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// BuiltBinaries returns the directory of make build's binaries (PDGATE_BIN_DIR, else bin/),
// failing t when one of names is missing there: for suites that hand the directory to
// something else (pdgate lab) rather than starting the binaries from their TestMain.
func BuiltBinaries(t testing.TB, names ...string) string {
	t.Helper()
	dir := os.Getenv("PDGATE_BIN_DIR")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range names {
		if _, err := os.Stat(filepath.Join(abs, b)); err != nil {
			t.Fatalf("%s: %v (run `make build`, or set PDGATE_BIN_DIR)", b, err)
		}
	}
	return abs
}
