package chart

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pdgate/pdgate/cmd/sidecar/allowlist"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// checkSidecarAllowlist runs the sidecar's own allow-list watcher (cmd/sidecar/allowlist) as
// the chart's sidecar ServiceAccount: the chart's Role must let its informers sync, and the
// pool's running pod must be allowed on the pool port while other hosts and ports are not.
func checkSidecarAllowlist(ctx context.Context, t *testing.T, s *apiServer, ns, serviceAccount string, pool *unstructured.Unstructured) {
	t.Helper()
	release := pool.GetName()
	sel, _, _ := unstructured.NestedStringMap(pool.Object, "spec", "selector", "matchLabels")
	ports, _, _ := unstructured.NestedSlice(pool.Object, "spec", "targetPorts")
	port := toInt(ports[0].(map[string]any)["number"])
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "member", Namespace: ns, Labels: sel},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine:test"}}},
	}
	created, err := s.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pool pod: %v", err)
	}
	created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.2", PodIPs: []corev1.PodIP{{IP: "127.0.0.2"}}}
	if _, err := s.kube.CoreV1().Pods(ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("set pod status: %v", err)
	}

	cfg := rest.CopyConfig(s.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	watcher := allowlist.NewKube(kc, dc, ns, release, logr.Discard())
	if err := watcher.Start(wctx, wctx); err != nil {
		t.Fatalf("sidecar allow-list with the chart's RBAC: %v", err)
	}
	member := protocol.HostPort{Host: "127.0.0.2", Port: port}
	deadline := time.Now().Add(20 * time.Second)
	for !watcher.Allowed(member) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool's running pod %s is never allowed", member)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, hp := range []protocol.HostPort{{Host: "127.0.0.2", Port: port + 1}, {Host: "127.0.0.3", Port: port}} {
		if watcher.Allowed(hp) {
			t.Errorf("allow-list lets %s through; only pool pods on pool ports may be called", hp)
		}
	}
}

// TestStaticSidecarRBAC: config/rbac/sidecar*.yaml (for installs without the chart) lets the
// sidecar's allow-list watcher run, in the namespace it is applied to.
func TestStaticSidecarRBAC(t *testing.T) {
	s := apiserver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const ns = "static-sidecar"
	if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := ""
	for _, o := range staticRBAC(t, "sidecar*.yaml") {
		o.SetNamespace(ns) // as `kubectl apply -n static-sidecar` with the namespace edited
		if o.GetKind() == "RoleBinding" {
			subs, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, sub := range subs {
				sub.(map[string]any)["namespace"] = ns
			}
			_ = unstructured.SetNestedSlice(o.Object, subs, "subjects")
		}
		if o.GetKind() == "ServiceAccount" {
			sa = o.GetName()
		}
		s.create(ctx, t, o)
	}
	pool := find(t, mustRender(t, "static-pool", ns, values(t, nil, "inferencePool.modelServers.matchLabels.app=x")), "InferencePool", "static-pool")
	s.create(ctx, t, pool)
	checkSidecarAllowlist(ctx, t, s, ns, sa, pool)
}
