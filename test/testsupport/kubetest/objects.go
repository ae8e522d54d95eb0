package kubetest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

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
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"
)

// RenderChart renders charts/pdgate like `helm install --dry-run` with the values files given
// (paths relative to the repository root) plus overrides.
func RenderChart(t testing.TB, release, namespace string, files []string, overrides map[string]any) []*unstructured.Unstructured {
	t.Helper()
	vals := map[string]any{}
	for _, f := range files {
		v, err := chartutil.ReadValuesFile(filepath.Join(RepoRoot(), f))
		if err != nil {
			t.Fatal(err)
		}
		vals = chartutil.CoalesceTables(v.AsMap(), vals)
	}
	vals = chartutil.CoalesceTables(overrides, vals)
	ch, err := loader.Load(filepath.Join(RepoRoot(), "charts", "pdgate"))
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

// Find returns the rendered object of that kind and name, failing the test when there is none.
func Find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("chart rendered no %s %s", kind, name)
	return nil
}

// Apply creates the objects on the API server as the admin (strict field validation), except
// those of skipKinds (a suite without controllers skips Deployments and starts the processes
// itself).
func (e *Env) Apply(ctx context.Context, t testing.TB, objs []*unstructured.Unstructured, skipKinds ...string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(e.Admin)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(e.Admin)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	for _, o := range objs {
		if slices.Contains(skipKinds, o.GetKind()) {
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

// KubeconfigAs writes a kubeconfig for a ServiceAccount identity (client certificate), so the
// process using it gets exactly the RBAC the chart grants that ServiceAccount.
func (e *Env) KubeconfigAs(t testing.TB, namespace, serviceAccount string) string {
	t.Helper()
	user, err := e.Env.AddUser(envtest.User{
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

// CreatePod creates a pod through the API and sets its status as a kubelet would.
func (e *Env) CreatePod(ctx context.Context, t testing.TB, ns, name, ip string, labels map[string]string, ready bool) {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "pdgate/sim:test"}}},
	}
	created, err := e.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	created.Status = PodStatus(ip, ready)
	if _, err := e.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s status: %v", name, err)
	}
}

// SetReady flips a pod's Ready condition as a kubelet would.
func (e *Env) SetReady(ctx context.Context, t testing.TB, ns, name string, ready bool) {
	t.Helper()
	pod, err := e.Kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status = PodStatus(pod.Status.PodIP, ready)
	if _, err := e.Kube.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("pod %s status: %v", name, err)
	}
}

// InferencePool is the pool name in ns over the pods matching labels, at targetPort, with its
// EPP Service "epp" on GIE's port 9002.
func InferencePool(ns, name string, labels map[string]string, targetPort int) *giev1.InferencePool {
	sel := map[giev1.LabelKey]giev1.LabelValue{}
	for k, v := range labels {
		sel[giev1.LabelKey(k)] = giev1.LabelValue(v)
	}
	return &giev1.InferencePool{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: giev1.InferencePoolSpec{
			Selector:          giev1.LabelSelector{MatchLabels: sel},
			TargetPorts:       []giev1.Port{{Number: giev1.PortNumber(targetPort)}},
			EndpointPickerRef: giev1.EndpointPickerRef{Name: "epp", Port: &giev1.Port{Number: 9002}},
		},
	}
}

// PodStatus is a Running pod's status with the IP and the Ready condition given.
func PodStatus(ip string, ready bool) corev1.PodStatus {
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	return corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond, LastTransitionTime: metav1.Now()}},
	}
}
