// Package hermetic replays GIE v1.5.0's hermetic integration cases (test/giehermetic) black-box
// against the real bin/epp in Kubernetes mode: a real kube-apiserver and etcd (envtest) with
// GIE's CRDs, the InferencePool, InferenceObjectives and InferenceModelRewrite of GIE's
// hermetic manifest, pods on loopback addresses whose vLLM metrics are served by fakes matching
// GIE's pod states, one bin/epp process per case (as GIE's harness runs one EPP per case), and
// every exchange over real ext_proc gRPC. GIE's expected responses and metrics are asserted,
// allowing only what cmd/epp/README.md documents as different. See README.md.
package hermetic

import (
	"fmt"
	"os"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"

	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

// suite's Client creates the objects; bin/epp runs with its Kubeconfig, a system:masters user:
// GIE's harness runs its EPP with envtest's admin config.
var suite = &kubetest.Suite{
	Name:        "hermetic",
	Binaries:    []string{"epp"},
	Schemes:     []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, giev1.Install, v1alpha2.Install},
	MastersUser: "hermetic-epp",
}

func TestMain(m *testing.M) {
	gie, err := kubetest.GIEDir()
	if err == nil {
		err = loadBaseResources(gie)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kubetest.Main(m, suite)
}
