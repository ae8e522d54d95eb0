package eppharness

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/pdgate/pdgate/cmd/internal/controlplane"
)

const module = "github.com/pdgate/pdgate"

// RepoRoot finds pdgate's module root from the working directory upwards.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && isModule(b, module) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no %s go.mod above the working directory: run from the pdgate repository or set BinDir", module)
		}
		dir = parent
	}
}

func isModule(gomod []byte, name string) bool {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1] == name
		}
	}
	return false
}

// gieModuleDir is GIE's module directory in the module cache (CRDs live there), as the
// repository's build resolves it.
func gieModuleDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return controlplane.GIEModuleDir(root)
}

// buildMu serialises builds: two EPPs started at once must not write one binary twice.
var buildMu sync.Mutex

// binary returns the EPP binary of kind in binDir, building it when it is missing.
func binary(kind Kind, binDir string) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	root, rootErr := RepoRoot()
	if binDir == "" {
		if rootErr != nil {
			return "", rootErr
		}
		binDir = filepath.Join(root, "bin")
	}
	name, pkg := "epp", "./cmd/epp"
	switch kind {
	case KindStockGIE:
		name, pkg = "gie-epp", controlplane.GIEModule+"/cmd/epp"
	case KindFloor:
		name, pkg = "pdgate-bench", "./cmd/pdgate-bench"
	}
	path, err := filepath.Abs(filepath.Join(binDir, name))
	if err != nil {
		return "", err
	}
	if st, err := os.Stat(path); err == nil && !st.IsDir() {
		return path, nil
	}
	if rootErr != nil {
		return "", fmt.Errorf("%s missing and cannot be built: %w", path, rootErr)
	}
	cmd := exec.Command("go", "build", "-o", path, pkg)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("building %s from %s: %w\n%s", path, pkg, err, out.String())
	}
	if _, err := os.Stat(path); err != nil {
		return "", errors.Join(fmt.Errorf("go build produced no %s", path), err)
	}
	return path, nil
}
