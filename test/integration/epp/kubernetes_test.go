package epp

import (
	"context"
	"strconv"
	"testing"
	"time"

	healthPb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	giev1 "sigs.k8s.io/gateway-api-inference-extension/api/v1"

	"github.com/pdgate/pdgate/test/inprocepp"
	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

func TestKubernetesModeFollowsPods(t *testing.T) {
	env, err := kubetest.Start(kubetest.NeedAssets(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	c, err := env.Client(clientgoscheme.AddToScheme, giev1.Install)
	if err != nil {
		t.Fatal(err)
	}
	setReady := func(pod *corev1.Pod, ip string, ready bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cur := &corev1.Pod{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(pod), cur); err != nil {
			t.Fatal(err)
		}
		cur.Status = kubetest.PodStatus(ip, ready)
		if err := c.Status().Update(ctx, cur); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const ns = "pdgate-it"
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	la, lb, port := listenPair(t)
	fakeVLLM(t, la, 0)
	fakeVLLM(t, lb, 0)
	if err := c.Create(ctx, kubetest.InferencePool(ns, "pool", map[string]string{"app": "vllm"}, port)); err != nil {
		t.Fatal(err)
	}
	newPod := func(name string) *corev1.Pod {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": "vllm"},
				Annotations: map[string]string{"model.aibrix.ai/engine": "vllm"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm"}}},
		}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	podA, podB := newPod("pod-a"), newPod("pod-b")
	setReady(podA, "127.0.0.2", true)
	setReady(podB, "127.0.0.3", false)

	o := parseOpts(t, "--pool-name", "pool", "--pool-namespace", ns, "--secure-serving=false",
		"--grpc-port", "0", "--grpc-health-port", "0", "--metrics-endpoint-auth=false", "--decision-trace")
	o.RestConfig = env.Admin
	o.ManagerOverrides = []func(*ctrl.Options){func(mo *ctrl.Options) {
		mo.Controller.SkipNameValidation = ptr.To(true)
		mo.Metrics.BindAddress = "0"
		mo.HealthProbeBindAddress = "0"
	}}
	addrs := inprocepp.RunBinary(context.Background(), t, o)
	epp := dialEPP(t, addrs.GRPC)
	a := "127.0.0.2:" + strconv.Itoa(port)
	b := "127.0.0.3:" + strconv.Itoa(port)

	// Ready follows the InferencePool sync.
	deadline := time.Now().Add(30 * time.Second)
	for healthStatus(t, addrs.Health, "") != healthPb.HealthCheckResponse_SERVING {
		if time.Now().After(deadline) {
			t.Fatal("EPP never became ready")
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitDestination(t, epp, a)

	// Readiness flips: a becomes unready, then b ready. Once b is picked ten times in a row the
	// EPP has seen both updates (b ready alone could be picked while a's update is still in
	// flight: CI saw that), and from then on every pick must be b.
	setReady(podA, "127.0.0.2", false)
	setReady(podB, "127.0.0.3", true)
	waitOnlyDestination(t, epp, b, 10)
	for i := 0; i < 5; i++ {
		if got := exchange(t, epp, nil, completion).set["x-gateway-destination-endpoint"]; got != b {
			t.Fatalf("destination %q after a went unready, want %s", got, b)
		}
	}

	// Deleting the only ready pod leaves nothing to pick: 503.
	if err := c.Delete(ctx, podB, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		r := exchange(t, epp, nil, completion)
		if r.immediate != nil && r.immediate.GetStatus().GetCode() == 503 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deleting pod-b did not empty the pool (last %+v)", r)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// a comes back.
	setReady(podA, "127.0.0.2", true)
	waitDestination(t, epp, a)
	r := exchange(t, epp, map[string]string{"x-pdgate-trace": "1"}, completion)
	if got := r.respSet["x-pdgate-decision"]; got != "default=pod-a-rank-0" {
		t.Fatalf("decision trace %q, want default=pod-a-rank-0", got)
	}
}
