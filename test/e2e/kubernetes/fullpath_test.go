package kubernetes

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

// model is the simulator-pd sample's model.
const model = "meta-llama/Llama-3.1-8B-Instruct"

var trace = map[string]string{"x-pdgate-trace": "1"}

// podTemplate reads the labels and a container's args of a chart Deployment's pod template.
func podTemplate(t *testing.T, dep *unstructured.Unstructured, list, container string) (map[string]string, []string) {
	t.Helper()
	labels, _, _ := unstructured.NestedStringMap(dep.Object, "spec", "template", "metadata", "labels")
	cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", list)
	for _, c := range cs {
		m := c.(map[string]any)
		if m["name"] == container {
			var args []string
			for _, a := range m["args"].([]any) {
				args = append(args, a.(string))
			}
			return labels, args
		}
	}
	t.Fatalf("%s has no %s %s", dep.GetName(), list, container)
	return nil, nil
}

// rewrite replaces --flag=value arguments (the chart's in-cluster addresses) by local ones.
func rewrite(args []string, set map[string]string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := set[name]; ok {
			out = append(out, name+"="+v)
			continue
		}
		out = append(out, a)
	}
	return out
}

// decodePod runs what the chart's decode pod runs: the simulator engine and the sidecar in
// front of it, with the chart's args, on its own loopback IP.
func decodePod(t *testing.T, name, ip string, enginePort, poolPort int, dep *unstructured.Unstructured, sidecarKubeconfig string) {
	t.Helper()
	_, engine := podTemplate(t, dep, "containers", "engine")
	start(t, name+"-engine", "sim", fmt.Sprintf("http://%s:%d/health", ip, enginePort), nil,
		append(rewrite(engine, map[string]string{"--host": ip, "--advertise-host": ip}), "--time-scale=50")...)
	_, sc := podTemplate(t, dep, "initContainers", "pdgate-sidecar")
	start(t, name+"-sidecar", "sidecar", fmt.Sprintf("http://%s:%d/sidecar/healthz", ip, poolPort), nil,
		append(rewrite(sc, map[string]string{"--listen": fmt.Sprintf("%s:%d", ip, poolPort),
			"--engine-url": fmt.Sprintf("http://%s:%d", ip, enginePort)}), "--kubeconfig="+sidecarKubeconfig)...)
}

// TestFullPath: requests flow gateway -> EPP (Kubernetes mode) -> decode sidecar -> prefill
// and decode simulators; routing follows pod readiness, deletion and new pods through the API
// within seconds; the sidecar refuses prefill targets outside the pool.
func TestFullPath(t *testing.T) {
	suite.NeedControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const ns, rel = "fullpath", "fp"
	prefillIP, decodeIPs := "127.0.0.2", []string{"127.0.0.3", "127.0.0.4", "127.0.0.5"}
	poolPort := commonPort(t, append([]string{prefillIP}, decodeIPs...)...)
	enginePort := commonPort(t, decodeIPs...)
	for enginePort == poolPort {
		enginePort = commonPort(t, decodeIPs...)
	}

	objs := kubetest.RenderChart(t, rel, ns, []string{"config/samples/simulator-pd.yaml"}, map[string]any{
		"inferencePool": map[string]any{"targetPorts": []any{map[string]any{"number": poolPort}}},
		"modelServers":  map[string]any{"decodeEnginePort": enginePort},
	})
	if _, err := suite.Env.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	suite.Env.Apply(ctx, t, objs, "Deployment") // no controllers run here: the test plays kubelet and starts the processes itself
	prefillDep := kubetest.Find(t, objs, "Deployment", rel+"-vllm-prefill-group-0")
	decodeDep := kubetest.Find(t, objs, "Deployment", rel+"-vllm-decode-group-0")
	sidecarKC := suite.Env.KubeconfigAs(t, ns, rel+"-sidecar")

	// The pods: processes on loopback IPs, then the Pod objects a kubelet would report.
	prefillLabels, prefillArgs := podTemplate(t, prefillDep, "containers", "engine")
	start(t, "prefill-0", "sim", fmt.Sprintf("http://%s:%d/health", prefillIP, poolPort), nil,
		append(rewrite(prefillArgs, map[string]string{"--host": prefillIP, "--advertise-host": prefillIP}), "--time-scale=50")...)
	suite.Env.CreatePod(ctx, t, ns, "prefill-0", prefillIP, prefillLabels, true)
	decodeLabels, _ := podTemplate(t, decodeDep, "containers", "engine")
	for i, ip := range decodeIPs[:2] {
		decodePod(t, fmt.Sprintf("decode-%d", i), ip, enginePort, poolPort, decodeDep, sidecarKC)
		suite.Env.CreatePod(ctx, t, ns, fmt.Sprintf("decode-%d", i), ip, decodeLabels, true)
	}

	// The EPP with the chart's args, configs and RBAC; the dev gateway in front.
	eppDep := kubetest.Find(t, objs, "Deployment", rel+"-epp")
	_, eppArgs := podTemplate(t, eppDep, "containers", "epp")
	configs, _, _ := unstructured.NestedStringMap(kubetest.Find(t, objs, "ConfigMap", rel+"-epp").Object, "data")
	cfgDir := t.TempDir()
	for k, v := range configs {
		writeFile(t, cfgDir+"/"+k, v)
	}
	grpcPort, healthPort, metricsPort := commonPort(t, "127.0.0.1"), commonPort(t, "127.0.0.1"), commonPort(t, "127.0.0.1")
	eppArgs = replaceValues(eppArgs, map[string]string{
		"--grpc-port": fmt.Sprint(grpcPort), "--grpc-health-port": fmt.Sprint(healthPort),
		"--metrics-port": fmt.Sprint(metricsPort), "--config-file": cfgDir + "/" + strings.TrimPrefix(valueOf(eppArgs, "--config-file"), "/config/"),
	})
	start(t, "epp", "epp", "", []string{"KUBECONFIG=" + suite.Env.KubeconfigAs(t, ns, rel+"-epp"), "NAMESPACE=" + ns, "POD_NAME=epp-0"}, eppArgs...)
	gwPort, adminPort := commonPort(t, "127.0.0.1"), commonPort(t, "127.0.0.1")
	start(t, "gateway", "gateway", fmt.Sprintf("http://127.0.0.1:%d/healthz", adminPort), nil,
		"--listen", fmt.Sprintf("127.0.0.1:%d", gwPort), "--admin-listen", fmt.Sprintf("127.0.0.1:%d", adminPort),
		"--epp", fmt.Sprintf("127.0.0.1:%d", grpcPort), "--epp-tls", "--epp-insecure-skip-verify")
	gw := fmt.Sprintf("http://127.0.0.1:%d", gwPort)

	n := 0
	prompt := func() string { n++; return fmt.Sprintf("request %d: tell me about prefill and decode", n) }

	// 1. Requests flow end to end with a remote prefill on every request.
	deadline := time.Now().Add(2 * time.Minute)
	for r := complete(t, gw, prompt(), trace); r.status != 200; r = complete(t, gw, prompt(), trace) {
		if time.Now().After(deadline) {
			t.Fatalf("no successful request through the gateway: %d %s", r.status, r.body)
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Every other request carries spoofed routing headers naming a host outside the pool: the
	// EPP (Kubernetes mode) must overwrite or remove them, or the sidecar would refuse the
	// prefill target (403) or call it.
	spoofed := map[string]string{"x-pdgate-trace": "1",
		"x-prefiller-host-port": fmt.Sprintf("127.0.0.9:%d", poolPort), "x-encoder-hosts-ports": fmt.Sprintf("127.0.0.9:%d", poolPort)}
	seen := map[string]int{}
	for i := 0; i < 8; i++ {
		hdr := trace
		if i%2 == 1 {
			hdr = spoofed
		}
		r := complete(t, gw, prompt(), hdr)
		if r.status != 200 || picked(r.decision, "prefill") != "prefill-0" || r.outcome != "ok" {
			t.Fatalf("request %d (spoofed headers %v): status %d decision %q prefill outcome %q body %s", i, i%2 == 1, r.status, r.decision, r.outcome, r.body)
		}
		seen[picked(r.decision, "decode")]++
	}
	t.Logf("decode picks over 8 requests: %v (every request prefilled on prefill-0)", seen)
	for d := range seen {
		if d != "decode-0" && d != "decode-1" {
			t.Fatalf("decode picks %v: only pool decode pods may serve", seen)
		}
	}

	// 2. The sidecar refuses a prefill target outside the pool.
	direct := fmt.Sprintf("http://%s:%d", decodeIPs[0], poolPort)
	if r := complete(t, direct, prompt(), map[string]string{"x-prefiller-host-port": fmt.Sprintf("127.0.0.9:%d", poolPort)}); r.status != 403 {
		t.Fatalf("sidecar called a prefill target outside the pool: %d %s", r.status, r.body)
	}

	// 3. A pod that becomes unready stops receiving traffic.
	began := time.Now()
	suite.Env.SetReady(ctx, t, ns, "decode-1", false)
	onlyDecode(t, gw, prompt, "decode-0")
	t.Logf("decode-1 unready: routing converged on decode-0 in %s", time.Since(began).Round(time.Millisecond))

	// 4. Scaling up: a new decode pod created through the API gets traffic.
	decodePod(t, "decode-2", decodeIPs[2], enginePort, poolPort, decodeDep, sidecarKC)
	began = time.Now()
	suite.Env.CreatePod(ctx, t, ns, "decode-2", decodeIPs[2], decodeLabels, true)
	eventuallyPicked(t, gw, prompt, "decode-2")
	t.Logf("decode-2 created: first picked after %s", time.Since(began).Round(time.Millisecond))

	// 5. Scaling down: a deleted pod gets no traffic, and its IP leaves the allow-list.
	began = time.Now()
	if err := suite.Env.Kube.CoreV1().Pods(ns).Delete(ctx, "decode-0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	onlyDecode(t, gw, prompt, "decode-2")
	t.Logf("decode-0 deleted: routing converged on decode-2 in %s", time.Since(began).Round(time.Millisecond))
	viaDecode2 := fmt.Sprintf("http://%s:%d", decodeIPs[2], poolPort)
	gone := map[string]string{"x-prefiller-host-port": fmt.Sprintf("%s:%d", decodeIPs[0], poolPort)}
	end := time.Now().Add(30 * time.Second)
	for r := complete(t, viaDecode2, prompt(), gone); r.status != 403; r = complete(t, viaDecode2, prompt(), gone) {
		if time.Now().After(end) {
			t.Fatalf("sidecar still calls the deleted pod %s: %d", decodeIPs[0], r.status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// onlyDecode waits (30 s at most) until ten consecutive requests are decoded on want.
func onlyDecode(t *testing.T, gw string, prompt func() string, want string) {
	t.Helper()
	end := time.Now().Add(30 * time.Second)
	streak := 0
	for streak < 10 {
		if time.Now().After(end) {
			t.Fatalf("routing did not converge on %s within 30s", want)
		}
		r := complete(t, gw, prompt(), trace)
		if r.status == 200 && picked(r.decision, "decode") == want {
			streak++
		} else {
			streak = 0
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// eventuallyPicked waits (60 s, 600 requests at most) until a request is decoded on want.
// Misses are paced (100 ms) so the request cap cannot run out before the EPP saw the new pod
// (watch event, then a metrics scrape) however fast the machine answers.
func eventuallyPicked(t *testing.T, gw string, prompt func() string, want string) {
	t.Helper()
	end := time.Now().Add(60 * time.Second)
	for i := 0; i < 600 && time.Now().Before(end); i++ {
		if r := complete(t, gw, prompt(), trace); r.status == 200 && picked(r.decision, "decode") == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s never picked", want)
}

func valueOf(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// replaceValues replaces the values of "--flag value" pairs.
func replaceValues(args []string, set map[string]string) []string {
	out := append([]string(nil), args...)
	for i := 0; i+1 < len(out); i++ {
		if v, ok := set[out[i]]; ok {
			out[i+1] = v
		}
	}
	return out
}
