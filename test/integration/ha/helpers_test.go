package ha

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// renderChart renders charts/pdgate like `helm install --dry-run` with the values files given
// (paths relative to the repository root) plus overrides.
func renderChart(t *testing.T, release, namespace string, files []string, overrides map[string]any) []*unstructured.Unstructured {
	t.Helper()
	vals := map[string]any{}
	for _, f := range files {
		v, err := chartutil.ReadValuesFile(filepath.Join(repoRoot(), f))
		if err != nil {
			t.Fatal(err)
		}
		vals = chartutil.CoalesceTables(v.AsMap(), vals)
	}
	vals = chartutil.CoalesceTables(overrides, vals)
	ch, err := loader.Load(filepath.Join(repoRoot(), "charts", "pdgate"))
	if err != nil {
		t.Fatal(err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.ClientOnly, install.DryRun, install.DisableHooks = true, true, true
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.35.3", Major: "1", Minor: "35"}
	install.ReleaseName, install.Namespace = release, namespace
	rel, err := install.Run(ch, vals)
	if err != nil {
		t.Fatalf("render chart: %v", err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(rel.Manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs
			}
			t.Fatalf("decode manifest: %v", err)
		}
		if len(m) > 0 {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

func find(t *testing.T, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("chart rendered no %s %s", kind, name)
	return nil
}

// apply creates every object on the API server as the admin.
func apply(ctx context.Context, t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(adminCfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(adminCfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s: %v", gvk, err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
		}
		if _, err := ri.Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

// kubeconfigAs writes a kubeconfig authenticating as the given ServiceAccount identity, so the
// process gets exactly the RBAC the chart grants that ServiceAccount.
func kubeconfigAs(t *testing.T, namespace, serviceAccount string) string {
	t.Helper()
	user, err := testEnv.AddUser(envtest.User{
		Name:   "system:serviceaccount:" + namespace + ":" + serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}, nil)
	if err != nil {
		t.Fatalf("add user: %v", err)
	}
	data, err := user.KubeConfig()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// eppProcess is one running EPP.
type eppProcess struct {
	name        string
	cmd         *exec.Cmd
	healthPort  int
	metricsPort int
	logPath     string
	done        chan error
}

// eppSpec is what the chart's EPP Deployment runs: args, literal env values, config files.
type eppSpec struct {
	args    []string
	env     []string
	configs map[string]string
}

// startEPP runs the EPP binary with the chart's args and env, its config files written to a
// temporary directory and its ports replaced by free loopback ports.
func startEPP(t *testing.T, name, namespace, kubeconfig string, spec eppSpec) *eppProcess {
	t.Helper()
	dir := t.TempDir()
	chartArgs := spec.args
	for k, v := range spec.configs {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := &eppProcess{name: name, healthPort: freePort(t), metricsPort: freePort(t), logPath: filepath.Join(dir, name+".log"), done: make(chan error, 1)}
	replace := map[string]string{
		"--grpc-port":        strconv.Itoa(freePort(t)),
		"--grpc-health-port": strconv.Itoa(p.healthPort),
		"--metrics-port":     strconv.Itoa(p.metricsPort),
	}
	var args []string
	for i := 0; i < len(chartArgs); i++ {
		a := chartArgs[i]
		if v, ok := replace[a]; ok && i+1 < len(chartArgs) {
			args = append(args, a, v)
			i++
			continue
		}
		if a == "--config-file" && i+1 < len(chartArgs) {
			args = append(args, a, filepath.Join(dir, strings.TrimPrefix(chartArgs[i+1], "/config/")))
			i++
			continue
		}
		args = append(args, a)
	}
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(eppBin, args...)
	p.cmd.Env = append(append(os.Environ(), spec.env...), "KUBECONFIG="+kubeconfig, "NAMESPACE="+namespace, "POD_NAME="+name)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.done <- p.cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			data, _ := os.ReadFile(p.logPath)
			t.Logf("--- %s log (last 4000 bytes) ---\n%s", name, tail(data, 4000))
		}
	})
	return p
}

// stop sends SIGTERM and waits; it kills the process if it outlives the grace period.
func (p *eppProcess) stop(grace time.Duration) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *eppProcess) exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

// health asks the EPP's gRPC health server about a service.
func (p *eppProcess) health(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", p.healthPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}

func (p *eppProcess) ready(ctx context.Context, service string) bool {
	s, err := p.health(ctx, service)
	return err == nil && s == healthpb.HealthCheckResponse_SERVING
}

// eventually polls cond every 250 ms until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("timed out after %s waiting for %s", timeout, what)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
