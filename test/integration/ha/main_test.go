// Package ha tests the EPP's high-availability modes against a real kube-apiserver: EPP
// processes built from cmd/epp, started with the arguments the Helm chart renders, running as
// the chart's ServiceAccount with the chart's RBAC.
package ha

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

var (
	testEnv  *envtest.Environment
	adminCfg *rest.Config
	kube     kubernetes.Interface
	eppBin   string
	// skipReason is set when the control plane binaries are missing outside CI.
	skipReason string
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

func TestMain(m *testing.M) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(repoRoot(), "bin", "envtest")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			skipReason = fmt.Sprintf("no %s in %s (KUBEBUILDER_ASSETS); run `make envtest`", bin, assets)
			if os.Getenv("CI") != "" {
				fmt.Fprintln(os.Stderr, "CI is set but the envtest control plane is unavailable:", skipReason)
				return 1
			}
			return m.Run()
		}
	}
	tmp, err := os.MkdirTemp("", "pdgate-ha-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	eppBin = filepath.Join(tmp, "epp")
	build := exec.Command("go", "build", "-o", eppBin, "./cmd/epp")
	build.Dir = repoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build cmd/epp: %v\n%s", err, out)
		return 1
	}
	gie, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "locate GIE module:", err)
		return 1
	}
	testEnv = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths: []string{filepath.Join(strings.TrimSpace(string(gie)), "config", "crd", "bases"),
			// The Prometheus Operator CRD subsets the chart tests use (ServiceMonitor, PodMonitor).
			filepath.Join(repoRoot(), "test", "integration", "chart", "testdata", "crds")},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	if adminCfg, err = testEnv.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start envtest:", err)
		return 1
	}
	defer func() {
		if err := testEnv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop envtest:", err)
		}
	}()
	if kube, err = kubernetes.NewForConfig(adminCfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

func needControlPlane(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
