// Package kubernetes is the full-path e2e against a real kube-apiserver: the InferencePool and
// the pods are created through the API (status IPs on loopback addresses served by simulator
// processes), the EPP runs in Kubernetes mode with the Helm chart's args and RBAC, routing
// sidecars sit in front of the decode simulators with their allow-list fed from the pool, and
// the dev gateway sends real HTTP through all of it.
package kubernetes

import (
	"testing"

	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

var suite = &kubetest.Suite{Name: "k8s-e2e", Binaries: []string{"epp", "sidecar", "sim", "gateway"}}

func TestMain(m *testing.M) { kubetest.Main(m, suite) }
