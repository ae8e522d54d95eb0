package kubetest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/pdgate/pdgate/test/testsupport"
)

// Suite is what a Kubernetes suite's TestMain sets up, once for all its tests: the binaries
// it starts, the control plane and the admin clients. The fields above the blank line say
// what the suite wants; Main fills in the ones below.
type Suite struct {
	// Name names the suite's temporary directories.
	Name string
	// Binaries are the cmd/ binaries the suite starts (see testsupport.Binaries).
	Binaries []string
	// BinariesWithoutControlPlane provides Binaries even when the control plane is missing: the
	// suite has tests that run without one.
	BinariesWithoutControlPlane bool
	// CRDDirs are CRDs to install beyond GIE's.
	CRDDirs []string
	// Schemes, when set, make Client an admin controller-runtime client over a scheme of them.
	Schemes []func(*runtime.Scheme) error
	// MastersUser, when set, adds a system:masters user of that name and writes its
	// kubeconfig to Kubeconfig: what processes run with where the suite mirrors GIE's harness,
	// which runs its EPP with envtest's admin config.
	MastersUser string

	Env        *Env // nil when the control plane is missing (SkipReason says why)
	BinDir     string
	Client     client.Client
	Kubeconfig string
	// SkipReason is set when the control plane binaries are missing outside CI.
	SkipReason string
}

// Main sets s up, runs the tests and exits with their status. Call it from TestMain.
func Main(m *testing.M, s *Suite) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	os.Exit(s.run(m))
}

// NeedAssets returns the envtest binaries' directory, skipping t when they are missing (or
// failing it under CI, see Assets).
func NeedAssets(t testing.TB) string {
	t.Helper()
	dir, skip, err := Assets()
	if err != nil {
		t.Fatal(err)
	}
	if skip != "" {
		t.Skip(skip)
	}
	return dir
}

// NeedControlPlane skips t when the control plane is missing.
func (s *Suite) NeedControlPlane(t testing.TB) {
	t.Helper()
	if s.SkipReason != "" {
		t.Skip(s.SkipReason)
	}
}

// Bin is the path of the named binary.
func (s *Suite) Bin(name string) string { return filepath.Join(s.BinDir, name) }

func (s *Suite) run(m *testing.M) int {
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	assets, skip, err := Assets()
	if err != nil {
		return fail(err)
	}
	if skip == "" || s.BinariesWithoutControlPlane {
		dir, cleanup, err := testsupport.Binaries(s.Name, s.Binaries...)
		if err != nil {
			return fail(err)
		}
		defer cleanup()
		s.BinDir = dir
	}
	if skip != "" {
		s.SkipReason = skip
		return m.Run()
	}
	if s.Env, err = Start(assets, s.CRDDirs...); err != nil {
		return fail(err)
	}
	defer func() {
		if err := s.Env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	if s.Schemes != nil {
		if s.Client, err = s.Env.Client(s.Schemes...); err != nil {
			return fail(err)
		}
	}
	if s.MastersUser != "" {
		dir, err := os.MkdirTemp("", "pdgate-"+s.Name)
		if err != nil {
			return fail(err)
		}
		defer os.RemoveAll(dir)
		if s.Kubeconfig, err = s.mastersKubeconfig(dir); err != nil {
			return fail(err)
		}
	}
	return m.Run()
}

// Client is an admin controller-runtime client over a scheme of schemes.
func (e *Env) Client(schemes ...func(*runtime.Scheme) error) (client.Client, error) {
	scheme := runtime.NewScheme()
	for _, add := range schemes {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("admin client scheme: %w", err)
		}
	}
	c, err := client.New(e.Admin, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	return c, nil
}

func (s *Suite) mastersKubeconfig(dir string) (string, error) {
	user, err := s.Env.Env.AddUser(envtest.User{Name: s.MastersUser, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return "", fmt.Errorf("add user %s: %w", s.MastersUser, err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		return "", fmt.Errorf("kubeconfig of %s: %w", s.MastersUser, err)
	}
	path := filepath.Join(dir, s.MastersUser+".kubeconfig")
	return path, os.WriteFile(path, data, 0o600)
}
