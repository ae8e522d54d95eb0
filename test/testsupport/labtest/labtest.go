// Package labtest starts pdgate labs (cmd/pdgate/lab) for the e2e suites: real simulators,
// sidecars, EPP and gateway processes on loopback addresses, stopped when the test ends.
package labtest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/test/testsupport"
)

// Start runs a lab until the test ends; when the test failed, the end of every process's log
// is logged. opts.BinDir defaults to make build's binaries (testsupport.BuiltBinaries) and
// opts.Dir to a temporary directory.
func Start(t testing.TB, opts lab.Options) *lab.Lab {
	t.Helper()
	if opts.BinDir == "" {
		opts.BinDir = testsupport.BuiltBinaries(t, "sim", "sidecar", "epp", "gateway")
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	t.Cleanup(func() {
		if t.Failed() {
			logTails(t, opts.Dir)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	l, err := lab.Start(ctx, opts)
	if err != nil {
		t.Fatalf("lab: %v", err)
	}
	t.Cleanup(l.Stop)
	return l
}

// logTails logs the last lines of each process log in dir.
func logTails(t testing.TB, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, p := range logs {
		b, _ := os.ReadFile(p)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) > 10 {
			lines = lines[len(lines)-10:]
		}
		t.Logf("--- %s\n%s", strings.TrimSuffix(filepath.Base(p), ".log"), strings.Join(lines, "\n"))
	}
}

// WriteTopology writes a topology's YAML to a file of its own and returns the path.
func WriteTopology(t testing.TB, yaml string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "topology.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// DefaultTopology is the YAML of the default lab (two P/D rolesets of AIBrix's pd strategy
// and a combined pod) with its paths made absolute and the top-level settings in set
// replacing the file's or added to them, e.g. "timeScale": "5".
func DefaultTopology(t testing.TB, set map[string]string) string {
	t.Helper()
	dir := filepath.Join(testsupport.RepoRoot(), filepath.Dir(lab.DefaultTopology))
	raw, err := os.ReadFile(filepath.Join(testsupport.RepoRoot(), lab.DefaultTopology))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	done := map[string]bool{}
	for _, line := range strings.Split(string(raw), "\n") {
		key, val, ok := strings.Cut(line, ":")
		switch {
		case !ok || strings.HasPrefix(line, " ") || strings.HasPrefix(line, "-") || strings.HasPrefix(line, "#"):
		case set[key] != "":
			line, done[key] = key+": "+set[key], true
		case key == "eppConfig" || key == "simProfile":
			line = key + ": " + filepath.Join(dir, strings.TrimSpace(val))
		case key == "pods":
			// New settings go before the pod list.
			keys := make([]string, 0, len(set))
			for k := range set {
				if !done[k] {
					keys = append(keys, k)
				}
			}
			slices.Sort(keys)
			for _, k := range keys {
				out = append(out, k+": "+set[k])
			}
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}
