package hermetic

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthPb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/pdgate/pdgate/test/giehermetic"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

// podIP places GIE's pod index i (GIE: 192.168.1.<i+1>) on loopback: 127.0.0.<i+1>, so GIE's
// last octet is kept. Index 98 (GIE's absent 192.168.1.99) is 127.0.0.99, where nothing runs.
func podIP(i int) string { return fmt.Sprintf("127.0.0.%d", i+1) }

// fakeVLLM serves /metrics in vLLM's names with one GIE pod state: num_requests_waiting is
// the queue, kv_cache_usage_perc the KV usage, lora_requests_info's running adapters the
// active models; max_lora is empty, so MaxActiveModels is 0 as with GIE's FakePodMetricsClient.
// It counts the scrapes it answered.
type fakeVLLM struct {
	state   giehermetic.PodState
	scrapes atomic.Int32
}

func (f *fakeVLLM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/metrics" {
		http.NotFound(w, r)
		return
	}
	fmt.Fprintf(w, `# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="base"} %d
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="base"} 0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{model_name="base"} %g
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="",running_lora_adapters=%q,waiting_lora_adapters=""} 1
`, f.state.QueueSize, f.state.KVCacheUsage, strings.Join(f.state.ActiveModels, ","))
	f.scrapes.Add(1)
}

// servePods starts a fake vLLM for every pod, all on one port (an InferencePool has one target
// port list for all its pods), and returns the port and the fakes.
func servePods(t *testing.T, pods []giehermetic.PodState) (int, []*fakeVLLM) {
	t.Helper()
	if len(pods) == 0 {
		return testsupport.FreePort(t), nil
	}
	for range 50 {
		first, err := net.Listen("tcp", podIP(pods[0].Index)+":0")
		if err != nil {
			t.Fatalf("%s must be usable (loopback): %v", podIP(pods[0].Index), err)
		}
		port := first.Addr().(*net.TCPAddr).Port
		ls := []net.Listener{first}
		for _, p := range pods[1:] {
			l, err := net.Listen("tcp", net.JoinHostPort(podIP(p.Index), strconv.Itoa(port)))
			if err != nil {
				break
			}
			ls = append(ls, l)
		}
		if len(ls) != len(pods) || !testsupport.Claim(port) {
			for _, l := range ls {
				_ = l.Close()
			}
			continue
		}
		fakes := make([]*fakeVLLM, len(pods))
		for i, l := range ls {
			fakes[i] = &fakeVLLM{state: pods[i]}
			srv := &http.Server{Handler: fakes[i], ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = srv.Serve(l) }()
			t.Cleanup(func() { _ = srv.Close() })
		}
		return port, fakes
	}
	t.Fatal("no port free on every pod address")
	return 0, nil
}

// createWorld creates the case's namespace, GIE's hermetic manifest in it (the pool's target
// port set to the fakes' port) and the pods, Ready with their loopback IPs, as GIE's harness
// does (WithBaseResources, WithPods).
func createWorld(ctx context.Context, t *testing.T, ns string, port int, pods []giehermetic.PodState) {
	t.Helper()
	if err := suite.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = suite.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	for _, base := range baseResources {
		o := base.DeepCopy()
		o.SetNamespace(ns)
		if o.GetKind() == "InferencePool" {
			if err := unstructured.SetNestedSlice(o.Object, []any{map[string]any{"number": int64(port)}}, "spec", "targetPorts"); err != nil {
				t.Fatal(err)
			}
		}
		if err := suite.Client.Create(ctx, o); err != nil {
			t.Fatalf("create %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	for _, p := range pods {
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.Name(), Namespace: ns, Labels: map[string]string{"app": giehermetic.PoolName}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}},
		}
		if err := suite.Client.Create(ctx, pod); err != nil {
			t.Fatalf("create pod %s: %v", pod.Name, err)
		}
		pod.Status = kubetest.PodStatus(podIP(p.Index), true)
		if err := suite.Client.Status().Update(ctx, pod); err != nil {
			t.Fatalf("pod %s status: %v", pod.Name, err)
		}
	}
}

// baseResources is GIE's hermetic manifest (test/testdata/inferencepool-with-model-hermetic.yaml
// in the GIE module), parsed as GIE's loadBaseResources parses it: the InferencePool, five
// InferenceObjectives and the InferenceModelRewrite, created as unstructured objects so that
// what the file omits (the rewrite target's weight) stays omitted.
var baseResources []*unstructured.Unstructured

func loadBaseResources(gieDir string) error {
	data, err := os.ReadFile(filepath.Join(gieDir, "test", "testdata", "inferencepool-with-model-hermetic.yaml"))
	if err != nil {
		return err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(u); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("decode hermetic manifest: %w", err)
		}
		if len(u.Object) > 0 {
			baseResources = append(baseResources, u)
		}
	}
}

// epp is one running bin/epp.
type epp struct {
	grpcPort, healthPort, metricsPort int
	exited                            <-chan struct{}
}

// startEPP runs bin/epp in Kubernetes mode for the pool in ns with GIE's harness settings
// (defaultEppServerOptions: pool name and namespace, the case's config text, plaintext gRPC,
// free ports) plus an unauthenticated /metrics (GIE's harness reads its registry in process)
// and a 100 ms flush of the pool gauges (GIE's harness waits up to 10 s for its default 5 s).
func startEPP(t *testing.T, ns, config string) *epp {
	t.Helper()
	e := &epp{grpcPort: testsupport.FreePort(t), healthPort: testsupport.FreePort(t), metricsPort: testsupport.FreePort(t)}
	e.exited = testsupport.Start(t, suite.Bin("epp"), []string{"KUBECONFIG=" + suite.Kubeconfig},
		"--pool-name", giehermetic.PoolName, "--pool-namespace", ns,
		"--config-text", config,
		"--secure-serving=false", "--metrics-endpoint-auth=false",
		"--grpc-port", strconv.Itoa(e.grpcPort), "--grpc-health-port", strconv.Itoa(e.healthPort),
		"--metrics-port", strconv.Itoa(e.metricsPort),
		"--refresh-prometheus-metrics-interval", "100ms")
	return e
}

// eventually polls cond every 50 ms until it holds, failing t after timeout with what and the
// last detail cond reported.
func (e *epp) eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, detail := cond()
		if ok {
			return
		}
		last = detail
		select {
		case <-e.exited:
			t.Fatalf("bin/epp exited while waiting for %s", what)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s (last: %s)", timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *epp) serving() (bool, string) {
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(e.healthPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false, err.Error()
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := healthPb.NewHealthClient(conn).Check(ctx, &healthPb.HealthCheckRequest{})
	if err != nil {
		return false, err.Error()
	}
	return r.GetStatus() == healthPb.HealthCheckResponse_SERVING, r.GetStatus().String()
}

// families scrapes bin/epp's /metrics.
func (e *epp) families() (map[string]*dto.MetricFamily, error) {
	resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(e.metricsPort) + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("/metrics: %s: %s", resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// compareFamily is GIE's GatherAndCompare for one family: the family name of the expected
// Prometheus text, scraped from bin/epp, must render identically (HELP, TYPE, every sample).
func (e *epp) compareFamily(name, expected string) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	want, err := p.TextToMetricFamilies(strings.NewReader(expected))
	if err != nil {
		return fmt.Errorf("parse expected: %w", err)
	}
	fams, err := e.families()
	if err != nil {
		return err
	}
	w, g := render(want[name]), render(fams[name])
	if w != g {
		return fmt.Errorf("want:\n%s\ngot:\n%s", w, g)
	}
	return nil
}

// render is a family's text form with its samples in label order.
func render(f *dto.MetricFamily) string {
	if f == nil {
		return "(no such family)"
	}
	var b strings.Builder
	_, _ = expfmt.MetricFamilyToText(&b, f)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	var head, samples []string
	for _, l := range lines {
		if strings.HasPrefix(l, "#") {
			head = append(head, l)
		} else {
			samples = append(samples, l)
		}
	}
	sort.Strings(samples)
	return strings.Join(append(head, samples...), "\n")
}

// series renders a family's samples as "name{k=v,...}" -> value (counters and gauges).
func series(f *dto.MetricFamily) map[string]string {
	out := map[string]string{}
	if f == nil {
		return out
	}
	for _, m := range f.GetMetric() {
		parts := make([]string, 0, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			parts = append(parts, l.GetName()+"="+l.GetValue())
		}
		sort.Strings(parts)
		v := m.GetCounter().GetValue()
		if f.GetType() == dto.MetricType_GAUGE {
			v = m.GetGauge().GetValue()
		}
		out[f.GetName()+"{"+strings.Join(parts, ",")+"}"] = strconv.FormatFloat(v, 'g', -1, 64)
	}
	return out
}

// counter sums a counter family's samples whose labels include every pair of match.
func counter(fams map[string]*dto.MetricFamily, name string, match map[string]string) float64 {
	var sum float64
	for _, m := range fams[name].GetMetric() {
		ok := true
		for k, v := range match {
			found := false
			for _, l := range m.GetLabel() {
				found = found || (l.GetName() == k && l.GetValue() == v)
			}
			ok = ok && found
		}
		if ok {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// dialExtProc connects to bin/epp's ext_proc listener.
func (e *epp) dialExtProc(t *testing.T) extProcPb.ExternalProcessorClient {
	t.Helper()
	conn, err := grpc.NewClient("127.0.0.1:"+strconv.Itoa(e.grpcPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return extProcPb.NewExternalProcessorClient(conn)
}
