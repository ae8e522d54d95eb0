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
	"testing"

	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

var (
	env        *kubetest.Env
	kube       kubernetes.Interface
	binDir     string
	skipReason string
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	os.Exit(run(m))
}

func run(m *testing.M) int {
	assets, skip, err := kubetest.Assets()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if skip != "" {
		skipReason = skip
		return m.Run()
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
		cmd.Dir = kubetest.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", b, err, out)
			return 1
		}
	}
	if env, err = kubetest.Start(assets); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	kube = env.Kube
	return m.Run()
}
