package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	corev1 "k8s.io/api/core/v1"
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

// renderChart renders charts/pdgate like `helm install --dry-run -f files` plus overrides.
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

// apply creates the objects as the admin; Deployments are skipped (no controllers run here:
// the test plays kubelet and starts the processes itself).
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
		if o.GetKind() == "Deployment" {
			continue
		}
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

// kubeconfigAs writes a kubeconfig for a ServiceAccount identity (client certificate), so the
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
	path := filepath.Join(t.TempDir(), serviceAccount+".kubeconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// commonPort finds a port free on every given loopback address (pods share the pool's port
// number on distinct IPs, as in a cluster).
func commonPort(t *testing.T, hosts ...string) int {
	t.Helper()
	for attempt := 0; attempt < 50; attempt++ {
		l, err := net.Listen("tcp", hosts[0]+":0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		ok := true
		for _, h := range hosts[1:] {
			l2, err := net.Listen("tcp", fmt.Sprintf("%s:%d", h, port))
			if err != nil {
				ok = false
				break
			}
			_ = l2.Close()
		}
		_ = l.Close()
		if ok {
			return port
		}
	}
	t.Fatal("no port free on every loopback address")
	return 0
}

// proc is one started binary.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// start runs a binary from binDir until the test ends; health (a URL) is polled until 200
// when given.
func start(t *testing.T, name, bin, health string, env []string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: exec.Command(filepath.Join(binDir, bin), args...), done: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); logf.Close(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(os.Interrupt)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("--- %s %v ---\n%s", name, args, b)
		}
	})
	if health != "" {
		waitHTTP(t, p, health, 2*time.Minute)
	}
	return p
}

func waitHTTP(t *testing.T, p *proc, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s exited before %s answered", p.name, url)
		default:
		}
		resp, err := http.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: %s not healthy within %s", p.name, url, timeout)
}

// createPod creates a pod through the API and sets its status as a kubelet would.
func createPod(ctx context.Context, t *testing.T, ns, name, ip string, labels map[string]string, ready bool) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "pdgate/sim:test"}}},
	}
	created, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	created.Status = podStatus(ip, ready)
	if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s status: %v", name, err)
	}
}

func setReady(ctx context.Context, t *testing.T, ns, name string, ready bool) {
	t.Helper()
	pod, err := kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = podStatus(pod.Status.PodIP, ready)
	if _, err := kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s status: %v", name, err)
	}
}

func podStatus(ip string, ready bool) corev1.PodStatus {
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	return corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond, LastTransitionTime: metav1.Now()}},
	}
}

// reply is what one completion through the gateway returned.
type reply struct {
	status   int
	decision string
	outcome  string
	body     string
}

// complete sends one chat completion to url with the given headers.
func complete(t *testing.T, url, prompt string, hdr map[string]string) reply {
	t.Helper()
	body := fmt.Sprintf(`{"model":%q,"messages":[{"role":"user","content":%q}],"max_tokens":8}`, model, prompt)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, decision: resp.Header.Get("x-pdgate-decision"),
		outcome: resp.Header.Get("x-pdgate-prefill-outcome"), body: string(b)}
}

// picked returns the endpoint a decision names for a profile ("decode", "prefill").
func picked(decision, profile string) string {
	for _, part := range strings.Split(decision, ";") {
		if v, ok := strings.CutPrefix(part, profile+"="); ok {
			return strings.TrimSuffix(v, "-rank-0")
		}
	}
	return ""
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}
