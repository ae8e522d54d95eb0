package controlplane

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
)

func TestMissingBinary(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		add  string
		want string
	}{
		{"", "no kube-apiserver in " + dir},
		{"kube-apiserver", "no etcd in " + dir},
		{"etcd", ""},
	} {
		if tc.add != "" {
			if err := os.WriteFile(filepath.Join(dir, tc.add), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		got := ""
		if err := MissingBinary(dir); err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("after adding %q: %q, want %q", tc.add, got, tc.want)
		}
	}
}

// The pool and a pod go through a real kube-apiserver: the pool passes strict validation
// against GIE's CRD, the admin kubeconfig on disk reaches the server, and the pod reads back
// Running and Ready on its IP although Create drops a status.
func TestControlPlane(t *testing.T) {
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join("..", "..", "..", "bin", "envtest")
	}
	if err := MissingBinary(assets); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but the envtest control plane is unavailable: %v", err)
		}
		t.Skipf("%v (hack/build-envtest.sh)", err)
	}
	gie, err := GIEModuleDir("")
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cp, err := Start(Options{Assets: assets, CRDDir: filepath.Join(gie, "config", "crd", "bases"),
		User: "controlplane-test", Kubeconfig: kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	if err := cp.CreatePool(ctx, InferencePool("default", "p", map[string]string{"app": "x"}, 8000, "p-epp", 9002)); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Host == "" {
		t.Fatal("kubeconfig names no server")
	}
	got, err := cp.Dynamic.Resource(PoolGVR).Namespace("default").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sel, _, _ := unstructured.NestedStringMap(got.Object, "spec", "selector", "matchLabels")
	epp, _, _ := unstructured.NestedString(got.Object, "spec", "endpointPickerRef", "name")
	if sel["app"] != "x" || epp != "p-epp" {
		t.Errorf("pool selector %v, endpoint picker %q", sel, epp)
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "default", Labels: map[string]string{"app": "x"}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "engine"}}},
		Status: RunningStatus("127.0.0.7")}
	if err := cp.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	read, err := cp.Kube.CoreV1().Pods("default").Get(ctx, "e", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, c := range read.Status.Conditions {
		ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
	}
	if read.Status.Phase != corev1.PodRunning || read.Status.PodIP != "127.0.0.7" || !ready {
		t.Errorf("pod status %+v", read.Status)
	}
}
