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
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"

	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

var (
	env *kubetest.Env
	// kube is the admin client the suite creates objects with.
	kube client.Client
	// kubeconfig is the admin kubeconfig bin/epp runs with.
	kubeconfig string
	eppBin     string
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
	binDir, cleanup, err := testsupport.Binaries("hermetic", "epp")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cleanup()
	eppBin = filepath.Join(binDir, "epp")
	gie, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		fmt.Fprintln(os.Stderr, "locate the GIE module:", err)
		return 1
	}
	if err := loadBaseResources(strings.TrimSpace(string(gie))); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
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
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, giev1.Install, v1alpha2.Install} {
		if err := add(scheme); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	if kube, err = client.New(env.Admin, client.Options{Scheme: scheme}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dir, err := os.MkdirTemp("", "pdgate-hermetic")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if kubeconfig, err = adminKubeconfig(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// adminKubeconfig writes a kubeconfig for a system:masters user: GIE's harness runs its EPP
// with envtest's admin config.
func adminKubeconfig(dir string) (string, error) {
	user, err := env.Env.AddUser(envtest.User{Name: "hermetic-epp", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("add user: %w", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "epp.kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}

func needControlPlane(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
}
