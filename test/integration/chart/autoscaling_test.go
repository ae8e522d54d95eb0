package chart

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestAutoscalingHPAs: one HPA per listed role, scaling its workload on pd-ratio-advisor's
// desired replicas for that pool and role; bad settings fail the install naming the key.
// TestApplyToAPIServer's "autoscaling" case stores the same objects on a real API server.
func TestAutoscalingHPAs(t *testing.T) {
	base := []string{"inferencePool.modelServers.matchLabels.app=x", "autoscaling.enabled=true"}
	prefill := []string{"autoscaling.roles.prefill.kind=Deployment", "autoscaling.roles.prefill.name=llama-prefill",
		"autoscaling.roles.prefill.maxReplicas=16"}
	t.Run("one HPA per role on the advisor's metric", func(t *testing.T) {
		sets := append(append(append([]string{}, base...), prefill...), "autoscaling.pool=llama",
			"autoscaling.roles.decode.kind=LeaderWorkerSet", "autoscaling.roles.decode.apiVersion=leaderworkerset.x-k8s.io/v1",
			"autoscaling.roles.decode.name=llama-decode", "autoscaling.roles.decode.minReplicas=2", "autoscaling.roles.decode.maxReplicas=32")
		objs, err := render(t, "rel", "ns", values(t, nil, sets...))
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			role, kind, apiVersion, name string
			min, max                     int64
		}{
			{"prefill", "Deployment", "apps/v1", "llama-prefill", 1, 16},
			{"decode", "LeaderWorkerSet", "leaderworkerset.x-k8s.io/v1", "llama-decode", 2, 32},
		} {
			hpa := find(t, objs, "HorizontalPodAutoscaler", "rel-"+tc.role)
			ref, _, _ := unstructured.NestedStringMap(hpa.Object, "spec", "scaleTargetRef")
			if ref["kind"] != tc.kind || ref["apiVersion"] != tc.apiVersion || ref["name"] != tc.name {
				t.Errorf("%s scaleTargetRef %v", tc.role, ref)
			}
			min, _, _ := unstructured.NestedFieldNoCopy(hpa.Object, "spec", "minReplicas")
			max, _, _ := unstructured.NestedFieldNoCopy(hpa.Object, "spec", "maxReplicas")
			if fmt.Sprint(min) != fmt.Sprint(tc.min) || fmt.Sprint(max) != fmt.Sprint(tc.max) {
				t.Errorf("%s replicas %v..%v, want %d..%d", tc.role, min, max, tc.min, tc.max)
			}
			metrics, _, _ := unstructured.NestedSlice(hpa.Object, "spec", "metrics")
			if len(metrics) != 1 {
				t.Fatalf("%s metrics %v", tc.role, metrics)
			}
			m := metrics[0].(map[string]any)
			name, _, _ := unstructured.NestedString(m, "external", "metric", "name")
			sel, _, _ := unstructured.NestedStringMap(m, "external", "metric", "selector", "matchLabels")
			target, _, _ := unstructured.NestedStringMap(m, "external", "target")
			if name != "pdgate_advisor_desired_replicas" || sel["pool"] != "llama" || sel["role"] != tc.role ||
				target["type"] != "AverageValue" || target["averageValue"] != "1" {
				t.Errorf("%s metric %v", tc.role, m)
			}
		}
		if lookup(objs, "HorizontalPodAutoscaler", "rel-encode") != nil {
			t.Error("an HPA for a role not listed")
		}
	})
	t.Run("the pool defaults to the InferencePool's name", func(t *testing.T) {
		objs, err := render(t, "rel", "ns", values(t, nil, append(append([]string{}, base...), prefill...)...))
		if err != nil {
			t.Fatal(err)
		}
		metrics, _, _ := unstructured.NestedSlice(find(t, objs, "HorizontalPodAutoscaler", "rel-prefill").Object, "spec", "metrics")
		pool, _, _ := unstructured.NestedString(metrics[0].(map[string]any), "external", "metric", "selector", "matchLabels", "pool")
		if pool != "rel" {
			t.Errorf("pool %q, want the release's InferencePool rel", pool)
		}
	})
	for _, tc := range []struct {
		name string
		sets []string
		want string
	}{
		{"no roles", nil, "autoscaling.roles names no workload"},
		{"min above max", append(append([]string{}, prefill...), "autoscaling.roles.prefill.minReplicas=20"), "minReplicas 20 is above maxReplicas 16"},
		{"no max", []string{"autoscaling.roles.decode.kind=Deployment", "autoscaling.roles.decode.name=d"}, "maxReplicas"},
		{"unknown role", []string{"autoscaling.roles.both.kind=Deployment"}, "both"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, "rel", "ns", values(t, nil, append(append([]string{}, base...), tc.sets...)...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %q", err, tc.want)
			}
		})
	}
}
