// Package recommended asserts, against the real bin/epp process in Kubernetes mode (a real
// kube-apiserver and etcd from envtest) and in standalone mode (an endpoints file), what
// config/recommended.yaml promises: short prompts stay on the decode pod, long uncached prompts
// get a prefill pod, a `Prefer: if-available` request is answered 412 for an uncached prompt
// and forwarded for a cached one, a burst between two metric scrapes spreads over equal decode
// pods, and routing headers a client sends never reach a pod. Every exchange is real ext_proc
// gRPC; the pods' vLLM metrics are served by fakes on loopback addresses.
package recommended

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

var (
	eppBin string
	// kube and kubeconfig are the admin client and the kubeconfig bin/epp runs with; nil and
	// "" when the control plane binaries are missing (skipReason says why).
	env        *kubetest.Env
	kube       client.Client
	kubeconfig string
	skipReason string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, cleanup, err := testsupport.Binaries("recommended", "epp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	eppBin = filepath.Join(dir, "epp")
	assets, skip, err := kubetest.Assets()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if skip != "" {
		skipReason = skip
		return m.Run()
	}
	if env, err = kubetest.Start(assets); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() { _ = env.Stop() }()
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, giev1.Install} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if kube, err = client.New(env.Admin, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	tmp, err := os.MkdirTemp("", "pdgate-recommended")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	user, err := env.Env.AddUser(envtest.User{Name: "recommended-epp", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	data, err := user.KubeConfig()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kubeconfig = filepath.Join(tmp, "epp.kubeconfig")
	if err := os.WriteFile(kubeconfig, data, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}
