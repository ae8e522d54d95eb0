package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

// apiServer is one kube-apiserver + etcd (envtest) shared by the package's tests, started on
// first use so that render-only runs (`-run TestSamples`) need no control plane.
type apiServer struct {
	env     *kubetest.Env
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
			fmt.Fprintln(os.Stderr, err)
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
		s.start()
	}
	if s.skip != "" {
		t.Skip(s.skip)
	}
	if s.err != nil {
		t.Fatalf("envtest: %v", s.err)
	}
	return s
}

func (s *apiServer) start() {
	assets, skip, err := kubetest.Assets()
	if err != nil || skip != "" {
		s.err, s.skip = err, skip
		return
	}
	env, err := kubetest.Start(assets, filepath.Join(kubetest.RepoRoot(), "test", "integration", "chart", "testdata", "crds"))
	if err != nil {
		s.err = err
		return
	}
	s.env, s.cfg, s.kube = env, env.Admin, env.Kube
	if s.dyn, err = dynamic.NewForConfig(s.cfg); err != nil {
		s.err = err
		return
	}
	dc, err := discovery.NewDiscoveryClientForConfig(s.cfg)
	if err != nil {
		s.err = err
		return
	}
	s.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
}
