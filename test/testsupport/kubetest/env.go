// Package kubetest is the envtest plumbing the Kubernetes suites share (test/e2e/kubernetes,
// test/integration/ha, hermetic, recommended), from their TestMain (Main) on: a real
// kube-apiserver and etcd with GIE's CRDs installed, the Helm chart rendered as `helm install
// --dry-run` would, rendered objects applied as the admin, kubeconfigs for a ServiceAccount
// identity, and pods whose status the test sets as a kubelet would. It is a test helper: it
// imports testing and fails the calling test on errors.
package kubetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/pdgate/pdgate/test/testsupport"
)

// RepoRoot is the repository's root directory.
func RepoRoot() string { return testsupport.RepoRoot() }

// Assets finds the envtest binaries (KUBEBUILDER_ASSETS, else bin/envtest). When kube-apiserver
// or etcd is missing it returns the reason the suite's tests should skip, or, with CI set, an
// error: CI must never skip them silently.
func Assets() (dir, skip string, err error) {
	dir = os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin", "envtest")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, serr := os.Stat(filepath.Join(dir, bin)); serr != nil {
			skip = fmt.Sprintf("no %s in %s (KUBEBUILDER_ASSETS); run `make envtest`", bin, dir)
			if os.Getenv("CI") != "" {
				return dir, "", fmt.Errorf("CI is set but the envtest control plane is unavailable: %s", skip)
			}
			return dir, skip, nil
		}
	}
	return dir, "", nil
}

// GIEDir is the directory of the GIE module the build uses (its CRDs and test manifests).
func GIEDir() (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		return "", fmt.Errorf("locate the GIE module: %w", err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("the GIE module is not in the module cache (run go mod download)")
	}
	return dir, nil
}

// Env is a running control plane and its admin clients.
type Env struct {
	Env   *envtest.Environment
	Admin *rest.Config
	Kube  kubernetes.Interface
}

// Start runs kube-apiserver and etcd from assets with GIE's CRDs (from the module the build
// uses) plus the CRDs under extraCRDDirs.
func Start(assets string, extraCRDDirs ...string) (*Env, error) {
	gie, err := GIEDir()
	if err != nil {
		return nil, err
	}
	e := &Env{Env: &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        append([]string{filepath.Join(gie, "config", "crd", "bases")}, extraCRDDirs...),
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}}
	if e.Admin, err = e.Env.Start(); err != nil {
		return nil, fmt.Errorf("start envtest: %w", err)
	}
	if e.Kube, err = kubernetes.NewForConfig(e.Admin); err != nil {
		_ = e.Env.Stop()
		return nil, fmt.Errorf("admin client: %w", err)
	}
	return e, nil
}

// Stop stops the control plane.
func (e *Env) Stop() error {
	if err := e.Env.Stop(); err != nil {
		return fmt.Errorf("stop envtest: %w", err)
	}
	return nil
}
