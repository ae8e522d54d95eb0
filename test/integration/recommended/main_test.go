// Package recommended asserts, against the real bin/epp process in Kubernetes mode (a real
// kube-apiserver and etcd from envtest) and in standalone mode (an endpoints file), what
// config/recommended.yaml promises: short prompts stay on the decode pod, long uncached prompts
// get a prefill pod, a `Prefer: if-available` request is answered 412 for an uncached prompt
// and forwarded for a cached one, a burst between two metric scrapes spreads over equal decode
// pods, and routing headers a client sends never reach a pod. Every exchange is real ext_proc
// gRPC; the pods' vLLM metrics are served by fakes on loopback addresses.
package recommended

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

// suite's Client and Kubeconfig (what bin/epp runs with in Kubernetes mode) are nil and ""
// when the control plane binaries are missing; the standalone tests still run.
var suite = &kubetest.Suite{
	Name:                        "recommended",
	Binaries:                    []string{"epp"},
	BinariesWithoutControlPlane: true,
	Schemes:                     []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, giev1.Install},
	MastersUser:                 "recommended-epp",
}

func TestMain(m *testing.M) { kubetest.Main(m, suite) }
