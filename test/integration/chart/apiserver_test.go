package chart

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// apiServer is one kube-apiserver + etcd (envtest) shared by the package's tests, started on
// first use so that render-only runs (`-run TestSamples`) need no control plane.
type apiServer struct {
	env     *envtest.Environment
	cfg     *rest.Config
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	mapper  *restmapper.DeferredDiscoveryRESTMapper
	startMu sync.Mutex
	err     error
	skip    string
}

var shared apiServer

func TestMain(m *testing.M) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	code := m.Run()
	if shared.env != nil {
		if err := shared.env.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stop envtest: %v\n", err)
		}
	}
	os.Exit(code)
}

// apiserver returns the shared control plane, starting it with GIE's CRDs (InferencePool v1,
// InferenceObjective, ...) and the monitoring CRD subsets from testdata. Without envtest
// binaries it skips the test, unless CI is set: in CI a missing control plane is a failure.
func apiserver(t *testing.T) *apiServer {
	t.Helper()
	s := &shared
	s.startMu.Lock()
	defer s.startMu.Unlock()
	if s.env == nil && s.err == nil && s.skip == "" {
		s.start(t)
	}
	if s.skip != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but the envtest control plane is unavailable: %s", s.skip)
		}
		t.Skip(s.skip)
	}
	if s.err != nil {
		t.Fatalf("envtest: %v", s.err)
	}
	return s
}

func (s *apiServer) start(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(repoRoot(t), "bin", "envtest")
	}
	for _, bin := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			s.skip = fmt.Sprintf("no %s in %s (KUBEBUILDER_ASSETS); run `make envtest` (hack/build-envtest.sh)", bin, assets)
			return
		}
	}
	gieDir, err := moduleDir("sigs.k8s.io/gateway-api-inference-extension")
	if err != nil {
		s.err = err
		return
	}
	s.env = &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths: []string{
			filepath.Join(gieDir, "config", "crd", "bases"),
			filepath.Join(repoRoot(t), "test", "integration", "chart", "testdata", "crds"),
		},
		ErrorIfCRDPathMissing: true,
		// The machine may be busy; a slow start is not a failure.
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}
	cfg, err := s.env.Start()
	if err != nil {
		s.err = fmt.Errorf("start kube-apiserver and etcd from %s: %w", assets, err)
		s.env = nil
		return
	}
	s.cfg = cfg
	if s.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		s.err = err
		return
	}
	if s.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		s.err = err
		return
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		s.err = err
		return
	}
	s.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
}

// moduleDir is the module cache directory of a dependency of this module, via `go list`.
func moduleDir(path string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", path).Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w", path, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return "", fmt.Errorf("module %s is not in the module cache (run go mod download)", path)
	}
	return dir, nil
}
