// Package ha tests the EPP's high-availability modes against a real kube-apiserver: EPP
// processes built from cmd/epp, started with the arguments the Helm chart renders, running as
// the chart's ServiceAccount with the chart's RBAC.
package ha

import (
	"path/filepath"
	"testing"

	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

var suite = &kubetest.Suite{
	Name:     "ha",
	Binaries: []string{"epp"},
	// The Prometheus Operator CRD subsets the chart tests use (ServiceMonitor, PodMonitor).
	CRDDirs: []string{filepath.Join(kubetest.RepoRoot(), "test", "integration", "chart", "testdata", "crds")},
}

func TestMain(m *testing.M) { kubetest.Main(m, suite) }
