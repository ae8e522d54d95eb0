package ha

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

// eppFromChart renders the chart with the values files, creates its objects (RBAC,
// ServiceAccount, InferencePool, ConfigMap, ...) in a fresh namespace and returns the EPP
// container's args and literal env, the EPP configs and a kubeconfig for the EPP's
// ServiceAccount.
func eppFromChart(ctx context.Context, t *testing.T, ns, release string, files []string, overrides map[string]any) (eppSpec, string) {
	t.Helper()
	if _, err := suite.Env.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objs := kubetest.RenderChart(t, release, ns, files, overrides)
	suite.Env.Apply(ctx, t, objs)
	dep := kubetest.Find(t, objs, "Deployment", release+"-epp")
	cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	c := cs[0].(map[string]any)
	var spec eppSpec
	for _, a := range c["args"].([]any) {
		spec.args = append(spec.args, a.(string))
	}
	for _, e := range c["env"].([]any) {
		m := e.(map[string]any)
		if v, ok := m["value"].(string); ok {
			spec.env = append(spec.env, m["name"].(string)+"="+v)
		}
	}
	spec.configs, _, _ = unstructured.NestedStringMap(kubetest.Find(t, objs, "ConfigMap", release+"-epp").Object, "data")
	return spec, suite.Env.KubeconfigAs(t, ns, release+"-epp")
}

// TestLeaderElection: two EPP replicas as the chart runs them (leader-election sample, the
// chart's RBAC, the chart's args) against a real API server. Both are live, exactly one is
// ready and holds the lease; when the leader stops, the other becomes ready.
func TestLeaderElection(t *testing.T) {
	suite.NeedControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns, release := "ha-leader", "ha-pool"
	spec, kc := eppFromChart(ctx, t, ns, release, []string{"config/samples/ha-leader-election.yaml"}, nil)

	a := startEPP(t, "epp-a", ns, kc, spec)
	b := startEPP(t, "epp-b", ns, kc, spec)
	testsupport.Eventually(t, 3*time.Minute, "both EPPs live", func() bool {
		if a.exited() || b.exited() {
			t.Fatalf("an EPP exited (a=%v b=%v)", a.exited(), b.exited())
		}
		return a.ready(ctx, "liveness") && b.ready(ctx, "liveness")
	})

	var leader, follower *eppProcess
	testsupport.Eventually(t, time.Minute, "exactly one ready EPP", func() bool {
		ra, rb := a.ready(ctx, "readiness"), b.ready(ctx, "readiness")
		switch {
		case ra && !rb:
			leader, follower = a, b
		case rb && !ra:
			leader, follower = b, a
		default:
			return false
		}
		return true
	})
	// The follower stays unready (for readiness and for the ext_proc service) while the
	// leader serves: sample it for a few seconds.
	for i := 0; i < 12; i++ {
		if follower.ready(ctx, "readiness") || follower.ready(ctx, "envoy.service.ext_proc.v3.ExternalProcessor") {
			t.Fatalf("%s (follower) reports ready while %s leads", follower.name, leader.name)
		}
		if !leader.ready(ctx, "readiness") {
			t.Fatalf("%s lost readiness without losing the lease", leader.name)
		}
		time.Sleep(250 * time.Millisecond)
	}
	lease, err := suite.Env.Kube.CoordinationV1().Leases(ns).Get(ctx, "epp-"+ns+"-"+release+".gateway-api-inference-extension.sigs.k8s.io", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("no held lease for the pool: %v %+v", err, lease)
	}
	holder := *lease.Spec.HolderIdentity

	leader.stop(30 * time.Second)
	testsupport.Eventually(t, 90*time.Second, follower.name+" takes over", func() bool { return follower.ready(ctx, "readiness") })
	lease, err = suite.Env.Kube.CoordinationV1().Leases(ns).Get(ctx, lease.Name, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == holder {
		t.Fatalf("lease not handed over: holder before %q, now %+v (%v)", holder, lease.Spec.HolderIdentity, err)
	}
}
