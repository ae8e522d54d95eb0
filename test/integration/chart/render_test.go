package chart

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const testNS = "pdgate-test"

// TestDefaultValuesNeedPoolSelector: like GIE's chart, the chart refuses to guess which pods
// form the pool.
func TestDefaultValuesNeedPoolSelector(t *testing.T) {
	_, err := render(t, "demo", testNS, map[string]any{})
	if err == nil || !strings.Contains(err.Error(), "inferencePool.modelServers.matchLabels is required") {
		t.Fatalf("want the matchLabels error, got %v", err)
	}
	objs := mustRender(t, "demo", testNS, values(t, nil, "inferencePool.modelServers.matchLabels.app=x"))
	checkInvariants(t, "demo", objs, values(t, nil, "inferencePool.modelServers.matchLabels.app=x"))
}

// TestSamples renders every documented values file and checks what must hold for any install.
func TestSamples(t *testing.T) {
	for _, f := range sampleFiles(t) {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			vals := values(t, []string{f})
			objs := mustRender(t, name, testNS, vals)
			checkInvariants(t, name, objs, vals)
		})
	}
}

// TestLint runs helm's own linter over the chart with each values file.
func TestLint(t *testing.T) {
	kv := &chartutil.KubeVersion{Version: "v1.35.3", Major: "1", Minor: "35"}
	for _, f := range sampleFiles(t) {
		res := lint.AllWithKubeVersion(chartDir(t), values(t, []string{f}), testNS, kv)
		for _, m := range res.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("%s: helm lint: %s", filepath.Base(f), m)
			}
		}
	}
}

// checkInvariants asserts the properties every rendering must have.
func checkInvariants(t *testing.T, release string, objs []*unstructured.Unstructured, vals map[string]any) {
	t.Helper()
	epp := release + "-epp"
	dep := find(t, objs, "Deployment", epp)
	svc := find(t, objs, "Service", epp)
	cm := find(t, objs, "ConfigMap", epp)
	find(t, objs, "ServiceAccount", epp)

	for _, o := range objs {
		switch o.GetKind() {
		case "ClusterRole", "ClusterRoleBinding":
			if !strings.Contains(o.GetName(), testNS) {
				t.Errorf("%s %s: cluster-scoped name must carry the namespace", o.GetKind(), o.GetName())
			}
		default:
			if o.GetNamespace() != testNS {
				t.Errorf("%s %s: namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), testNS)
			}
		}
	}

	// EPP arguments match the objects around it.
	c := container(t, dep, "containers", "epp")
	args := stringList(c["args"])
	flags := flagValues(args)
	one := func(name string) string {
		t.Helper()
		v := flags[name]
		if len(v) != 1 {
			t.Fatalf("epp flag --%s: want exactly one, got %q in %q", name, v, args)
		}
		return v[0]
	}
	if one("pool-name") != release || one("pool-namespace") != testNS {
		t.Errorf("epp pool flags %q/%q, want %s/%s", one("pool-namespace"), one("pool-name"), testNS, release)
	}
	if one("secure-serving") != "true" {
		t.Errorf("--secure-serving=%s; the chart must keep TLS on", one("secure-serving"))
	}
	cfgFile := strings.TrimPrefix(one("config-file"), "/config/")
	data, _ := field(t, cm, "data").(map[string]any)
	text, ok := data[cfgFile].(string)
	if !ok {
		t.Fatalf("--config-file %s is not a key of ConfigMap %s", cfgFile, epp)
	}
	for k, v := range data {
		var doc struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(v.(string)), &doc); err != nil || doc.Kind != "EndpointPickerConfig" {
			t.Errorf("ConfigMap entry %s is not an EndpointPickerConfig (kind %q, err %v)", k, doc.Kind, err)
		}
	}
	_ = text
	for _, deprecated := range []string{"total-queued-requests-metric", "total-running-requests-metric",
		"kv-cache-usage-percentage-metric", "lora-info-metric", "cache-info-metric"} {
		if _, ok := flags[deprecated]; ok {
			t.Errorf("epp passes --%s, which GIE v1.5.0 rejects at startup", deprecated)
		}
	}
	grpcPort := one("grpc-port")
	healthPort := one("grpc-health-port")
	if p := portOf(t, svc, "grpc-ext-proc"); p != grpcPort {
		t.Errorf("Service grpc-ext-proc port %s, EPP --grpc-port %s", p, grpcPort)
	}
	replicas := field(t, dep, "spec", "replicas")
	leader := flags["ha-enable-leader-election"] != nil
	if leader != (toInt(replicas) > 1 && haMode(vals) == "leader-election") {
		t.Errorf("leader election %v with %v replicas in mode %s", leader, replicas, haMode(vals))
	}
	wantSvc := "inference-extension"
	if leader {
		wantSvc = ""
	}
	for probe, leaderSvc := range map[string]string{"livenessProbe": "liveness", "readinessProbe": "readiness"} {
		g, _ := c[probe].(map[string]any)["grpc"].(map[string]any)
		want := wantSvc
		if leader {
			want = leaderSvc
		}
		if g == nil || toString(g["port"]) != healthPort || g["service"] != want {
			t.Errorf("%s = %v, want gRPC on %s service %q", probe, c[probe], healthPort, want)
		}
	}
	if (lookup(objs, "Role", epp+"-leader-election") != nil) != leader {
		t.Errorf("leader-election Role present=%v, leader election=%v", !leader, leader)
	}

	checkRBAC(t, objs)

	if pool := lookup(objs, "InferencePool", release); pool != nil {
		ref := field(t, pool, "spec", "endpointPickerRef").(map[string]any)
		if ref["name"] != epp || toString(ref["port"].(map[string]any)["number"]) != grpcPort {
			t.Errorf("InferencePool endpointPickerRef %v, want %s:%s", ref, epp, grpcPort)
		}
		checkModelServers(t, release, pool, objs)
	}
}

func checkRBAC(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	allowedWrites := map[string]bool{"leases": true, "events": true, "tokenreviews": true, "subjectaccessreviews": true}
	for _, o := range objs {
		if o.GetKind() != "Role" && o.GetKind() != "ClusterRole" {
			continue
		}
		rules, _ := field(t, o, "rules").([]any)
		for _, r := range rules {
			rule := r.(map[string]any)
			for _, key := range []string{"apiGroups", "resources", "verbs"} {
				if l, ok := rule[key]; ok && slices.Contains(stringList(l), "*") {
					t.Errorf("%s %s: wildcard %s", o.GetKind(), o.GetName(), key)
				}
			}
			res, _ := rule["resources"].([]any)
			for _, v := range stringList(rule["verbs"]) {
				if v == "get" || v == "list" || v == "watch" {
					continue
				}
				for _, rr := range res {
					if !allowedWrites[rr.(string)] {
						t.Errorf("%s %s: verb %s on %s is more than the EPP or the sidecar needs", o.GetKind(), o.GetName(), v, rr)
					}
				}
			}
		}
	}
}

// checkModelServers: every sample pod (Deployment, or StatefulSet for TRT-LLM decode-capable
// pods) is a member of the pool, carries the labels llm-d and AIBrix read, and decode-capable
// pods run the sidecar as a native sidecar on the pool port.
func checkModelServers(t *testing.T, release string, pool *unstructured.Unstructured, objs []*unstructured.Unstructured) {
	t.Helper()
	sel := field(t, pool, "spec", "selector", "matchLabels").(map[string]any)
	poolPort := toString(field(t, pool, "spec", "targetPorts").([]any)[0].(map[string]any)["number"])
	for _, d := range append(ofKind(objs, "Deployment"), ofKind(objs, "StatefulSet")...) {
		labels, _, _ := unstructured.NestedStringMap(d.Object, "spec", "template", "metadata", "labels")
		if labels["app.kubernetes.io/component"] != "model-server" {
			continue
		}
		for k, v := range sel {
			if labels[k] != toString(v) {
				t.Errorf("%s: pod label %s=%q does not match the pool selector %q", d.GetName(), k, labels[k], v)
			}
		}
		for _, k := range []string{"llm-d.ai/role", "role-name", "roleset-name", "model.aibrix.ai/engine",
			"model.aibrix.ai/port", "model.aibrix.ai/name", "inference.networking.k8s.io/engine-type"} {
			if labels[k] == "" {
				t.Errorf("%s: pod template lacks label %s", d.GetName(), k)
			}
		}
		if labels["model.aibrix.ai/port"] != poolPort {
			t.Errorf("%s: model.aibrix.ai/port %s, pool port %s", d.GetName(), labels["model.aibrix.ai/port"], poolPort)
		}
		inits, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "initContainers")
		if labels["role-name"] == "prefill" {
			if len(inits) != 0 {
				t.Errorf("%s: prefill pods need no sidecar", d.GetName())
			}
			continue
		}
		sc := container(t, d, "initContainers", "pdgate-sidecar")
		if sc["restartPolicy"] != "Always" {
			t.Errorf("%s: sidecar restartPolicy %v, want Always (native sidecar)", d.GetName(), sc["restartPolicy"])
		}
		sf := flagValues(stringList(sc["args"]))
		if got := sf["listen"]; len(got) != 1 || !strings.HasSuffix(got[0], ":"+poolPort) {
			t.Errorf("%s: sidecar --listen %q, want the pool port %s", d.GetName(), got, poolPort)
		}
		if got := sf["inference-pool"]; len(got) != 1 || got[0] != testNS+"/"+release {
			t.Errorf("%s: sidecar --inference-pool %q, want %s/%s", d.GetName(), got, testNS, release)
		}
		eng := container(t, d, "containers", "engine")
		enginePort := toString(eng["ports"].([]any)[0].(map[string]any)["containerPort"])
		if enginePort == poolPort || !strings.HasSuffix(sf["engine-url"][0], ":"+enginePort) {
			t.Errorf("%s: sidecar forwards to %q, engine listens on %s (pool port %s)", d.GetName(), sf["engine-url"], enginePort, poolPort)
		}
		if d.Object["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["automountServiceAccountToken"] != false {
			t.Errorf("%s: the engine container must not get an API token", d.GetName())
		}
	}
}

func portOf(t *testing.T, svc *unstructured.Unstructured, name string) string {
	t.Helper()
	for _, p := range field(t, svc, "spec", "ports").([]any) {
		m := p.(map[string]any)
		if m["name"] == name {
			return toString(m["port"])
		}
	}
	t.Fatalf("Service %s has no port %s", svc.GetName(), name)
	return ""
}

func haMode(vals map[string]any) string {
	if ie, ok := vals["inferenceExtension"].(map[string]any); ok {
		if ha, ok := ie["ha"].(map[string]any); ok {
			if m, ok := ha["mode"].(string); ok {
				return m
			}
		}
	}
	return "leader-election"
}
