package chart

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// staticRBAC reads the config/rbac files that glob matches (epp*.yaml, sidecar*.yaml): the
// manifests for installs without the chart.
func staticRBAC(t *testing.T, glob string) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "config", "rbac", glob))
	if err != nil || len(files) == 0 {
		t.Fatalf("no config/rbac/%s (%v)", glob, err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		o, err := decodeManifest(string(data))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		objs = append(objs, o...)
	}
	return objs
}

// TestStaticRBACMatchesChart: config/rbac grants exactly what the chart grants, role by role.
func TestStaticRBACMatchesChart(t *testing.T) {
	objs := mustRender(t, "demo", testNS, values(t, nil, "inferencePool.modelServers.matchLabels.app=x", "inferenceExtension.replicas=2"))
	static := staticRBAC(t, "epp*.yaml")
	pairs := map[string]string{ // chart name -> static name
		"Role/demo-epp-sa":                    "Role/pdgate-epp-sa",
		"Role/demo-epp-non-sa":                "Role/pdgate-epp-non-sa",
		"Role/demo-epp-leader-election":       "Role/pdgate-epp-leader-election",
		"ClusterRole/demo-" + testNS + "-epp": "ClusterRole/pdgate-epp-metrics-auth",
	}
	seen := 0
	for _, o := range objs {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		key := o.GetKind() + "/" + o.GetName()
		want, ok := pairs[key]
		if !ok {
			t.Errorf("chart role %s has no counterpart in config/rbac", key)
			continue
		}
		kind, name, _ := strings.Cut(want, "/")
		s := lookup(static, kind, name)
		if s == nil {
			t.Errorf("config/rbac lacks %s (the chart's %s)", want, key)
			continue
		}
		seen++
		if !reflect.DeepEqual(o.Object["rules"], s.Object["rules"]) {
			t.Errorf("%s rules differ from the chart's %s:\n static %v\n chart  %v", want, key, s.Object["rules"], o.Object["rules"])
		}
	}
	if seen != len(pairs) {
		t.Errorf("compared %d roles, want %d", seen, len(pairs))
	}
}

// TestStaticRBACOnAPIServer applies config/rbac/epp*.yaml to a real API server and checks
// what the pdgate-epp ServiceAccount may do.
func TestStaticRBACOnAPIServer(t *testing.T) {
	s := apiserver(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, o := range staticRBAC(t, "epp*.yaml") {
		s.create(ctx, t, o)
	}
	ask(ctx, t, s, "system:serviceaccount:default:pdgate-epp", []access{
		{"watch", "", "pods", "", "default", true},
		{"list", "inference.networking.k8s.io", "inferencepools", "", "default", true},
		{"get", "inference.networking.x-k8s.io", "inferenceobjectives", "x", "default", true},
		{"update", "coordination.k8s.io", "leases", "x", "default", true},
		{"create", "authorization.k8s.io", "subjectaccessreviews", "", "", true},
		{"list", "", "pods", "", "kube-system", false},
		{"delete", "", "pods", "x", "default", false},
		{"list", "", "secrets", "", "default", false},
	})
}
