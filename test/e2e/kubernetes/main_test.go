// Package kubernetes is the full-path e2e against a real kube-apiserver: the InferencePool and
// the pods are created through the API (status IPs on loopback addresses served by simulator
// processes), the EPP runs in Kubernetes mode with the Helm chart's args and RBAC, routing
// sidecars sit in front of the decode simulators with their allow-list fed from the pool, and
// the dev gateway sends real HTTP through all of it.
package kubernetes

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
	testEnv    *envtest.Environment
	adminCfg   *rest.Config
	kube       kubernetes.Interface
	binDir     string
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
	dir, err := os.MkdirTemp("", "pdgate-k8s-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binDir = dir
	for _, b := range []string{"epp", "sidecar", "sim", "gateway"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, b), "./cmd/"+b)
		cmd.Dir = repoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", b, err, out)
			return 1
		}
	}
	gie, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "locate GIE module:", err)
		return 1
	}
	testEnv = &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{filepath.Join(strings.TrimSpace(string(gie)), "config", "crd", "bases")},
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
