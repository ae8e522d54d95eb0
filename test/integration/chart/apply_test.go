package chart

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// applyCase is one install: values files plus --set overrides.
type applyCase struct {
	name  string
	files []string
	sets  []string
}

// applyCases: every documented values file, plus combinations the samples do not cover.
func applyCases(t *testing.T) []applyCase {
	var cases []applyCase
	for _, f := range sampleFiles(t) {
		cases = append(cases, applyCase{name: strings.TrimSuffix(filepath.Base(f), ".yaml"), files: []string{f}})
	}
	samples := filepath.Join(repoRoot(t), "config", "samples")
	cases = append(cases,
		applyCase{name: "defaults", sets: []string{"inferencePool.modelServers.matchLabels.app=x"}},
		applyCase{name: "sim-monitoring", files: []string{
			filepath.Join(samples, "simulator-pd.yaml"), filepath.Join(samples, "monitoring.yaml")}},
		applyCase{name: "autoscaling", sets: []string{"inferencePool.modelServers.matchLabels.app=x", "autoscaling.enabled=true",
			"autoscaling.roles.prefill.kind=Deployment", "autoscaling.roles.prefill.name=llama-prefill", "autoscaling.roles.prefill.maxReplicas=16",
			"autoscaling.roles.decode.kind=LeaderWorkerSet", "autoscaling.roles.decode.apiVersion=leaderworkerset.x-k8s.io/v1",
			"autoscaling.roles.decode.name=llama-decode", "autoscaling.roles.decode.minReplicas=2", "autoscaling.roles.decode.maxReplicas=32"}},
		applyCase{name: "sim-combined-sglang", files: []string{filepath.Join(samples, "simulator-pd.yaml")},
			sets: []string{"modelServers.engine=sglang", "modelServers.combined.replicas=1", "inferenceExtension.metricsPort=9191",
				"inferenceExtension.monitoring.prometheus.auth.enabled=false"}},
	)
	return cases
}

// TestApplyToAPIServer creates every rendered object on a real kube-apiserver (envtest with
// GIE's CRDs) with strict field validation, so the server's own schemas check each field the
// chart writes, then asks the server's RBAC authorizer what the EPP and the sidecar may do.
func TestApplyToAPIServer(t *testing.T) {
	s := apiserver(t)
	for i, tc := range applyCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			ns := fmt.Sprintf("chart-%d", i)
			release := tc.name
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := s.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create namespace: %v", err)
			}
			vals := values(t, tc.files, tc.sets...)
			objs, err := render(t, release, ns, vals)
			if err != nil {
				t.Fatalf("render: %v", err)
			}
			for _, o := range objs {
				s.create(ctx, t, o)
			}
			checkStored(ctx, t, s, ns, release, objs)
			checkEPPAccess(ctx, t, s, ns, release, objs)
			if lookup(objs, "ServiceAccount", release+"-sidecar") != nil {
				checkSidecarAccess(ctx, t, s, ns, release)
				checkSidecarAllowlist(ctx, t, s, ns, release+"-sidecar", find(t, objs, "InferencePool", release))
			}
		})
	}
}

// create stores one object with fieldValidation=Strict: an unknown or duplicated field is an
// error, not a warning the server drops.
func (s *apiServer) create(ctx context.Context, t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	gvk := o.GroupVersionKind()
	mapping, err := s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		s.mapper.Reset()
		if mapping, err = s.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			t.Errorf("%s %s: the API server does not serve %s: %v", o.GetKind(), o.GetName(), gvk, err)
			return
		}
	}
	var ri interface {
		Create(context.Context, *unstructured.Unstructured, metav1.CreateOptions, ...string) (*unstructured.Unstructured, error)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ri = s.dyn.Resource(mapping.Resource).Namespace(o.GetNamespace())
	} else {
		ri = s.dyn.Resource(mapping.Resource)
	}
	if _, err := ri.Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Errorf("API server rejected %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
}

// checkStored reads back what the server stored (after its defaulting) for the fields that
// would silently change behaviour if the server had dropped them.
func checkStored(ctx context.Context, t *testing.T, s *apiServer, ns, release string, objs []*unstructured.Unstructured) {
	t.Helper()
	if lookup(objs, "InferencePool", release) != nil {
		gvr, _ := s.mapper.RESTMapping(lookup(objs, "InferencePool", release).GroupVersionKind().GroupKind(), "v1")
		pool, err := s.dyn.Resource(gvr.Resource).Namespace(ns).Get(ctx, release, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("read back InferencePool: %v", err)
		}
		ref, _, _ := unstructured.NestedMap(pool.Object, "spec", "endpointPickerRef")
		if ref["kind"] != "Service" || ref["name"] != release+"-epp" || ref["failureMode"] == nil {
			t.Errorf("stored endpointPickerRef %v, want Service %s-epp with a failure mode", ref, release)
		}
	}
	var templates []corev1.PodTemplateSpec
	var names []string
	for _, d := range ofKind(objs, "Deployment") {
		got, err := s.kube.AppsV1().Deployments(ns).Get(ctx, d.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("read back Deployment %s: %v", d.GetName(), err)
		}
		templates, names = append(templates, got.Spec.Template), append(names, "Deployment "+d.GetName())
	}
	for _, d := range ofKind(objs, "StatefulSet") {
		got, err := s.kube.AppsV1().StatefulSets(ns).Get(ctx, d.GetName(), metav1.GetOptions{})
		if err != nil {
			t.Fatalf("read back StatefulSet %s: %v", d.GetName(), err)
		}
		templates, names = append(templates, got.Spec.Template), append(names, "StatefulSet "+d.GetName())
	}
	for i, tmpl := range templates {
		d := names[i]
		for _, c := range tmpl.Spec.InitContainers {
			if c.Name == "pdgate-sidecar" && (c.RestartPolicy == nil || *c.RestartPolicy != corev1.ContainerRestartPolicyAlways) {
				t.Errorf("%s: stored sidecar has restartPolicy %v; the server did not keep it a native sidecar", d, c.RestartPolicy)
			}
		}
		for _, c := range tmpl.Spec.Containers {
			if c.Name == "epp" && (c.ReadinessProbe == nil || c.ReadinessProbe.GRPC == nil) {
				t.Errorf("%s: stored EPP readiness probe %v, want gRPC", d, c.ReadinessProbe)
			}
		}
	}
}

// access is one question to the authorizer: may the subject do verb on resource?
type access struct {
	verb, group, resource, name, namespace string
	allowed                                bool
}

func (a access) String() string {
	return fmt.Sprintf("%s %s.%s/%s in %q", a.verb, a.resource, a.group, a.name, a.namespace)
}

func checkEPPAccess(ctx context.Context, t *testing.T, s *apiServer, ns, release string, objs []*unstructured.Unstructured) {
	t.Helper()
	leader := lookup(objs, "Role", release+"-epp-leader-election") != nil
	metricsAuth := lookup(objs, "ClusterRole", release+"-"+ns+"-epp") != nil
	checks := []access{
		{"list", "", "pods", "", ns, true},
		{"watch", "", "pods", "", ns, true},
		{"get", "inference.networking.k8s.io", "inferencepools", release, ns, true},
		{"watch", "inference.networking.x-k8s.io", "inferenceobjectives", "", ns, true},
		{"list", "inference.networking.x-k8s.io", "inferencemodelrewrites", "", ns, true},
		{"create", "coordination.k8s.io", "leases", "", ns, leader},
		{"create", "authentication.k8s.io", "tokenreviews", "", "", metricsAuth},
		// Least privilege: nothing beyond reading the pool.
		{"create", "", "pods", "", ns, false},
		{"update", "inference.networking.k8s.io", "inferencepools", release, ns, false},
		{"get", "", "secrets", "", ns, false},
		{"list", "", "pods", "", "default", false},
		{"create", "coordination.k8s.io", "leases", "", "default", false},
	}
	ask(ctx, t, s, "system:serviceaccount:"+ns+":"+release+"-epp", checks)
}

func checkSidecarAccess(ctx context.Context, t *testing.T, s *apiServer, ns, release string) {
	t.Helper()
	// The allow-list's own requests, made as the sidecar's ServiceAccount: its informer lists
	// the pool with a metadata.name field selector and lists every pod of the namespace.
	cfg := rest.CopyConfig(s.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + release + "-sidecar",
		Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	pools := dyn.Resource(schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}).Namespace(ns)
	if l, err := pools.List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + release}); err != nil || len(l.Items) != 1 {
		t.Errorf("sidecar listing its pool by name: %v (items %v)", err, l)
	}
	if _, err := pools.List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("sidecar listing every pool: err %v, want Forbidden", err)
	}
	podsGVR := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	if _, err := dyn.Resource(podsGVR).Namespace(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("sidecar listing pods: %v", err)
	}
	ask(ctx, t, s, "system:serviceaccount:"+ns+":"+release+"-sidecar", []access{
		{"list", "", "pods", "", ns, true},
		{"watch", "", "pods", "", ns, true},
		{"get", "inference.networking.k8s.io", "inferencepools", release, ns, true},
		{"watch", "inference.networking.k8s.io", "inferencepools", release, ns, true},
		{"list", "inference.networking.k8s.io", "inferencepools", release, ns, true},
		{"get", "inference.networking.k8s.io", "inferencepools", "another-pool", ns, false},
		{"list", "inference.networking.k8s.io", "inferencepools", "", ns, false},
		{"create", "", "pods", "", ns, false},
		{"get", "", "secrets", "", ns, false},
		{"list", "", "pods", "", "default", false},
	})
}

// ask sends SubjectAccessReviews: the API server's RBAC authorizer evaluates the chart's Roles.
// ask checks each access with a SubjectAccessReview. The API server's RBAC authorizer reads
// roles and bindings from an informer, so one created a moment ago may not be visible yet: an
// access that must be allowed is asked again until it is (or for 10 s), and the accesses that
// must be refused are asked only after every allowed one has been seen, when the bindings are in
// the authorizer's cache.
func ask(ctx context.Context, t *testing.T, s *apiServer, user string, checks []access) {
	t.Helper()
	review := func(c access) *authzv1.SubjectAccessReview {
		sar := &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User:   user,
			Groups: []string{"system:serviceaccounts", "system:authenticated"},
			ResourceAttributes: &authzv1.ResourceAttributes{
				Verb: c.verb, Group: c.group, Resource: c.resource, Name: c.name, Namespace: c.namespace,
			},
		}}
		got, err := s.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("SubjectAccessReview %s: %v", c, err)
		}
		return got
	}
	for _, c := range checks {
		if !c.allowed {
			continue
		}
		deadline := time.Now().Add(10 * time.Second)
		got := review(c)
		for !got.Status.Allowed && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			got = review(c)
		}
		if !got.Status.Allowed {
			t.Errorf("%s may %s: allowed=false, want true (%s)", user, c, got.Status.Reason)
		}
	}
	for _, c := range checks {
		if c.allowed {
			continue
		}
		if got := review(c); got.Status.Allowed {
			t.Errorf("%s may %s: allowed=true, want false (%s)", user, c, got.Status.Reason)
		}
	}
}
