// Package ha tests the EPP's high-availability modes against a real kube-apiserver: EPP
// processes built from cmd/epp, started with the arguments the Helm chart renders, running as
// the chart's ServiceAccount with the chart's RBAC.
package ha

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

var (
	env    *kubetest.Env
	kube   kubernetes.Interface
	eppBin string
	// skipReason is set when the control plane binaries are missing outside CI.
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
	binDir, cleanup, err := testsupport.Binaries("ha", "epp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	eppBin = filepath.Join(binDir, "epp")
	// The Prometheus Operator CRD subsets the chart tests use (ServiceMonitor, PodMonitor).
	if env, err = kubetest.Start(assets, filepath.Join(kubetest.RepoRoot(), "test", "integration", "chart", "testdata", "crds")); err != nil {
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

func needControlPlane(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
