package allowlist

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport"
)

func hp(t *testing.T, s string) protocol.HostPort {
	t.Helper()
	h, err := protocol.ParseHostPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestStatic(t *testing.T) {
	list, err := ParseList("10.0.0.1:8000, [fd00::1]:8000,Prefill.NS.svc.:9000")
	if err != nil {
		t.Fatal(err)
	}
	s := NewStatic(list)
	tests := map[string]bool{
		"10.0.0.1:8000":             true,
		"[::ffff:10.0.0.1]:8000":    true, // same address, IPv4-mapped spelling
		"10.0.0.1:8001":             false,
		"10.0.0.2:8000":             false,
		"[fd00:0:0:0:0:0:0:1]:8000": true,
		"[fd00::2]:8000":            false,
		"prefill.ns.svc:9000":       true,
		"prefill.ns.svc.evil:9000":  false,
		"127.0.0.1:8000":            false,
	}
	for in, want := range tests {
		if got := s.Allowed(hp(t, in)); got != want {
			t.Errorf("Allowed(%s) = %v, want %v", in, got, want)
		}
	}
	if _, err := ParseList("10.0.0.1"); err == nil {
		t.Error("port-less entry must fail")
	}
}

func TestLoadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "allow")
	_ = os.WriteFile(p, []byte("# prefill pods\n10.0.0.1:8000 # p0\n\n10.0.0.2:8000,10.0.0.3:8000\n"), 0o600)
	list, err := LoadFile(p)
	if err != nil || len(list) != 3 {
		t.Fatalf("%v %v", list, err)
	}
	_ = os.WriteFile(p, []byte("10.0.0.1:8000\nnot-an-address\n"), 0o600)
	if _, err := LoadFile(p); err == nil {
		t.Fatal("want an error naming the line")
	}
}

func TestParsePoolRef(t *testing.T) {
	for in, want := range map[string][2]string{"pool": {"default", "pool"}, "ns/pool": {"ns", "pool"}} {
		ns, name, err := ParsePoolRef(in)
		if err != nil || ns != want[0] || name != want[1] {
			t.Errorf("%s: %s %s %v", in, ns, name, err)
		}
	}
	for _, bad := range []string{"", "/x", "x/", "a/b/c"} {
		if _, _, err := ParsePoolRef(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func pool(ports ...int64) *unstructured.Unstructured {
	var tps []any
	for _, p := range ports {
		tps = append(tps, map[string]any{"number": p})
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
		"metadata": map[string]any{"name": "pool", "namespace": "ns"},
		"spec":     map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": "llm"}}, "targetPorts": tps},
	}}
}

func pod(name, ip string, labels map[string]string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: labels},
		Status:     corev1.PodStatus{Phase: phase, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}},
	}
}

func TestKube(t *testing.T) {
	kc := kubefake.NewSimpleClientset(
		pod("p0", "10.0.0.1", map[string]string{"app": "llm"}, corev1.PodRunning),
		pod("p1", "10.0.0.2", map[string]string{"app": "other"}, corev1.PodRunning),
		pod("p2", "10.0.0.3", map[string]string{"app": "llm"}, corev1.PodPending),
		pod("p3", "fd00::3", map[string]string{"app": "llm"}, corev1.PodRunning),
	)
	dc := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{PoolGVR: "InferencePoolList"}, pool(8000, 8200))
	k := NewKube(kc, dc, "ns", "pool", logr.Discard())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
	defer scancel()
	if err := k.Start(ctx, sctx); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 5*time.Second, "the allow-list update", func() bool { return k.Allowed(hp(t, "10.0.0.1:8000")) })
	tests := map[string]bool{
		"10.0.0.1:8000":       true,
		"10.0.0.1:8200":       true,
		"10.0.0.1:9000":       false, // not a target port
		"10.0.0.2:8000":       false, // not selected
		"10.0.0.3:8000":       false, // not running
		"[fd00:0000::3]:8000": true,
		"p0:8000":             false, // names never allowed in this mode
		"10.0.0.9:8000":       false,
	}
	for in, want := range tests {
		if got := k.Allowed(hp(t, in)); got != want {
			t.Errorf("Allowed(%s) = %v, want %v", in, got, want)
		}
	}
	// A pod that starts running later is allowed without a restart.
	p2 := pod("p2", "10.0.0.3", map[string]string{"app": "llm"}, corev1.PodRunning)
	if _, err := kc.CoreV1().Pods("ns").UpdateStatus(ctx, p2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 5*time.Second, "the allow-list update", func() bool { return k.Allowed(hp(t, "10.0.0.3:8000")) })
	// Deleting the pool empties the list.
	if err := dc.Resource(PoolGVR).Namespace("ns").Delete(ctx, "pool", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, 5*time.Second, "the allow-list update", func() bool { return !k.Allowed(hp(t, "10.0.0.1:8000")) })
}

func TestPoolMembershipErrors(t *testing.T) {
	bad := []*unstructured.Unstructured{
		{Object: map[string]any{"spec": map[string]any{"targetPorts": []any{map[string]any{"number": int64(1)}}}}},
		{Object: map[string]any{"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}}}}},
		{Object: map[string]any{"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"a": "b"}}, "targetPorts": []any{map[string]any{"number": int64(0)}}}}},
	}
	for i, u := range bad {
		if _, _, err := poolMembership(u); err == nil {
			t.Errorf("case %d accepted", i)
		}
	}
}
