package recommended

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/test/inprocepp"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/eppclient"
	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

const (
	headerDestination = "x-gateway-destination-endpoint"
	headerPrefiller   = "x-prefiller-host-port"
	// spoofed is a prefill address no pod has: it must never reach a pod.
	spoofed = "203.0.113.9:8000"
)

// pod is one fake model server of the fleet.
type pod struct {
	name, ip, role string
	labels         map[string]string
}

// fleet is 2 prefill and 4 decode pods labelled the llm-d way (llm-d.ai/role) or the AIBrix way
// (role-name, roleset-name), on loopback addresses base+1...
func fleet(style string, base int) []pod {
	var out []pod
	for i, role := range []string{"prefill", "prefill", "decode", "decode", "decode", "decode"} {
		p := pod{name: fmt.Sprintf("%s-%s-%d", style, role, i), ip: fmt.Sprintf("127.0.0.%d", base+i+1), role: role}
		if style == "llmd" {
			p.labels = map[string]string{"llm-d.ai/role": role}
		} else {
			p.labels = map[string]string{"role-name": role, "roleset-name": "rs", "model.aibrix.ai/engine": "vllm"}
		}
		out = append(out, p)
	}
	return out
}

func serveMetrics(t *testing.T, pods []pod) int {
	t.Helper()
	fakes := make([]inprocepp.Pod, len(pods))
	for i, p := range pods {
		fakes[i] = inprocepp.Pod{Name: p.name, IP: p.ip, Labels: p.labels, Metrics: inprocepp.IdleVLLM}
	}
	return inprocepp.ServeMetrics(t, fakes)
}

// epp is a running bin/epp with config/recommended.yaml and an ext_proc client.
type epp struct {
	client *extprocclient.Client
	byAddr map[string]pod // "ip:port" → pod
	seq    int
}

func configPath() string { return filepath.Join(testsupport.RepoRoot(), "config", "recommended.yaml") }

// startProcess runs bin/epp with args (plus the config and free ports) and env.
func startProcess(t *testing.T, pods []pod, port int, env []string, args ...string) *epp {
	t.Helper()
	grpcPort := testsupport.FreePort(t)
	args = append(args, "--config-file", configPath(), "--secure-serving=false", "--metrics-endpoint-auth=false",
		"--grpc-port", strconv.Itoa(grpcPort), "--grpc-health-port", strconv.Itoa(testsupport.FreePort(t)),
		"--metrics-port", strconv.Itoa(testsupport.FreePort(t)))
	exited := testsupport.Start(t, suite.Bin("epp"), env, args...)
	c, err := extprocclient.Dial("127.0.0.1:"+strconv.Itoa(grpcPort), extprocclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e := &epp{client: c, byAddr: map[string]pod{}}
	for _, p := range pods {
		e.byAddr[p.ip+":"+strconv.Itoa(port)] = p
	}
	// Ready once a short prompt is routed to a decode pod (endpoints known, metrics scraped).
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatal("bin/epp exited")
		default:
		}
		r, done, err := e.route(nil, "hello")
		done()
		if err == nil && r.immediate == 0 && e.byAddr[r.destination].role == "decode" {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("bin/epp never routed a request (last: %+v, %v)", r, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func startStandalone(t *testing.T, pods []pod) *epp {
	t.Helper()
	port := serveMetrics(t, pods)
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for _, p := range pods {
		labels, _ := json.Marshal(p.labels)
		fmt.Fprintf(&b, "- name: %s\n  address: %s\n  port: %d\n  labels: %s\n", p.name, p.ip, port, labels)
	}
	path := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return startProcess(t, pods, port, nil, "--endpoints-file", path, "--pool-name", "recommended")
}

func startKubernetes(t *testing.T, pods []pod) *epp {
	t.Helper()
	if suite.Client == nil {
		t.Skip(suite.SkipReason)
	}
	port := serveMetrics(t, pods)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns := fmt.Sprintf("recommended-%d", time.Now().UnixNano()%1e9)
	if err := suite.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = suite.Client.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	if err := suite.Client.Create(ctx, kubetest.InferencePool(ns, "pool", map[string]string{"app": "vllm"}, port)); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		labels := map[string]string{"app": "vllm"}
		for k, v := range p.labels {
			labels[k] = v
		}
		obj := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: ns, Labels: labels},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}},
		}
		if err := suite.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		obj.Status = kubetest.PodStatus(p.ip, true)
		if err := suite.Client.Status().Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	return startProcess(t, pods, port, []string{"KUBECONFIG=" + suite.Kubeconfig}, "--pool-name", "pool", "--pool-namespace", ns)
}

// answer is what the EPP told the gateway about one request.
type answer struct {
	immediate   int
	destination string
	prefiller   string
	removed     []string
}

// route sends one chat request over a real ext_proc stream and leaves it open (the request is
// in flight: the ledger holds its charges) until done is called.
func (e *epp) route(headers map[string]string, prompt string) (answer, func(), error) {
	e.seq++
	h := map[string]string{"x-request-id": fmt.Sprintf("rec-%d", e.seq)}
	for k, v := range headers {
		h[k] = v
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "max_tokens": 8,
		"messages": []map[string]string{{"role": "user", "content": prompt}}})
	rt, _, done, err := eppclient.Open(e.client, "/v1/chat/completions", h, body, 20*time.Second)
	if err != nil {
		done()
		return answer{}, func() {}, err
	}
	var a answer
	if rt.Immediate != nil {
		a.immediate = rt.Status()
		return a, done, nil
	}
	a.destination, _ = rt.Header(headerDestination)
	a.prefiller, _ = rt.Header(headerPrefiller)
	a.removed = rt.RemovedHeaders()
	return a, done, nil
}

func (e *epp) send(t *testing.T, headers map[string]string, prompt string) answer {
	t.Helper()
	a, done, err := e.route(headers, prompt)
	done()
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// longPrompt is a distinct prompt of about n bytes (n/4 tokens).
func longPrompt(tag string, n int) string {
	unit := "The quarterly report for " + tag + " lists revenue, costs and the outlook per region. "
	return strings.Repeat(unit, n/len(unit)+1)[:n]
}

func TestRecommendedConfig(t *testing.T) {
	modes := []struct {
		name  string
		start func(*testing.T, []pod) *epp
		style string
		base  int
	}{
		{"standalone/llm-d labels", startStandalone, "llmd", 10},
		{"standalone/AIBrix labels", startStandalone, "aibrix", 20},
		{"kubernetes/llm-d labels", startKubernetes, "llmd", 30},
	}
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			pods := fleet(m.style, m.base)
			e := m.start(t, pods)
			role := func(addr string) string { return e.byAddr[addr].role }

			t.Run("short prompt stays on the decode pod", func(t *testing.T) {
				a := e.send(t, nil, "What is the capital of France?")
				if a.immediate != 0 || role(a.destination) != "decode" || a.prefiller != "" {
					t.Fatalf("%+v: want a decode pod and no prefill leg", a)
				}
			})
			t.Run("long uncached prompt gets a prefill pod", func(t *testing.T) {
				a := e.send(t, nil, longPrompt("uncached", 8192))
				if a.immediate != 0 || role(a.destination) != "decode" || role(a.prefiller) != "prefill" {
					t.Fatalf("%+v: want a decode pod with a prefill pod", a)
				}
			})
			t.Run("Prefer: if-available for an uncached prompt is answered 412", func(t *testing.T) {
				a := e.send(t, map[string]string{"prefer": "if-available"}, longPrompt("never-seen", 8192))
				if a.immediate != 412 {
					t.Fatalf("%+v: want 412", a)
				}
			})
			t.Run("Prefer: if-available for a cached prompt is forwarded to the pod that holds it", func(t *testing.T) {
				prompt := longPrompt("cached", 8192)
				first := e.send(t, nil, prompt)
				if role(first.destination) != "decode" {
					t.Fatalf("first request %+v", first)
				}
				// The prefix index learns the pick asynchronously: a 412 records nothing, so the
				// conditional request is simply asked again until the index has the blocks.
				deadline := time.Now().Add(10 * time.Second)
				for {
					a := e.send(t, map[string]string{"Prefer": "if-available"}, prompt)
					if a.immediate == 0 {
						if a.destination != first.destination || a.prefiller != "" {
							t.Fatalf("%+v: want decode-only on %s, which holds the prompt", a, first.destination)
						}
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("a cached prompt kept being answered %d", a.immediate)
					}
					time.Sleep(100 * time.Millisecond)
				}
			})
			t.Run("spoofed routing headers never reach a pod", func(t *testing.T) {
				for _, prompt := range []string{"hi", longPrompt("spoof", 8192)} {
					a := e.send(t, map[string]string{headerPrefiller: spoofed, "X-Prefiller-Host-Port": spoofed}, prompt)
					if a.immediate != 0 || a.prefiller == spoofed || !slices.Contains(a.removed, headerPrefiller) && a.prefiller == "" {
						t.Fatalf("%+v: the client's %s must be removed or replaced", a, headerPrefiller)
					}
				}
			})
			t.Run("a burst between scrapes spreads over the decode pods", func(t *testing.T) {
				counts := map[string]int{}
				var dones []func()
				for i := 0; i < 40; i++ {
					a, done, err := e.route(nil, fmt.Sprintf("burst question %d: what is %d + %d?", i, i, i))
					dones = append(dones, done)
					if err != nil || a.immediate != 0 || role(a.destination) != "decode" {
						t.Fatalf("request %d: %+v %v", i, a, err)
					}
					counts[a.destination]++
				}
				for _, d := range dones {
					d()
				}
				lo, hi := 1<<30, 0
				for addr, p := range e.byAddr {
					if p.role != "decode" {
						continue
					}
					lo, hi = min(lo, counts[addr]), max(hi, counts[addr])
				}
				if lo == 0 || float64(hi)/float64(lo) > 1.5 {
					t.Fatalf("per decode pod %v: max/min must be <= 1.5", counts)
				}
			})
		})
	}
}
