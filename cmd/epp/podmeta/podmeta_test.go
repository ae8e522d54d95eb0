package podmeta

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

func TestMirrorAnnotations(t *testing.T) {
	tests := []struct {
		name        string
		labels, ann map[string]string
		want        map[string]string
	}{
		{name: "none", want: map[string]string{}},
		{name: "labels kept", labels: map[string]string{"a": "1"}, want: map[string]string{"a": "1"}},
		{name: "annotation mirrored", labels: map[string]string{"a": "1"}, ann: map[string]string{"model.aibrix.ai/config": "{}"},
			want: map[string]string{"a": "1", protocol.AnnotationLabelPrefix + "model.aibrix.ai/config": "{}"}},
		{name: "mirror wins over a colliding label",
			labels: map[string]string{protocol.AnnotationLabelPrefix + "k": "label"}, ann: map[string]string{"k": "ann"},
			want: map[string]string{protocol.AnnotationLabelPrefix + "k": "ann"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := MirrorAnnotations(tt.labels, tt.ann)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Fatalf("got %v, want %v", got, tt.want)
				}
			}
			if tt.labels != nil {
				if _, ok := tt.labels[protocol.AnnotationLabelPrefix+"model.aibrix.ai/config"]; ok && tt.name == "annotation mirrored" {
					t.Fatal("input labels mutated")
				}
			}
		})
	}
}

type nopFactory struct{}

func (nopFactory) NewEndpoint(_ context.Context, m *fwkdl.EndpointMetadata, _ datalayer.PoolInfo) fwkdl.Endpoint {
	return fwkdl.NewEndpoint(m, fwkdl.NewMetrics())
}
func (nopFactory) ReleaseEndpoint(fwkdl.Endpoint) {}

func readyPod(name, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{"app": "m"},
			Annotations: map[string]string{"model.aibrix.ai/engine": "sglang"}},
		Status: corev1.PodStatus{PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

func TestWrapDatastoreMirrorsOnBothPaths(t *testing.T) {
	ctx := context.Background()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	// Resync path: the pod exists before the pool is set.
	reader := fake.NewClientBuilder().WithScheme(scheme).WithObjects(readyPod("resynced", "10.0.0.1")).Build()
	ds := WrapDatastore(datastore.NewDatastore(ctx, nopFactory{}, 0))
	pool := datalayer.NewEndpointPool("ns", "pool")
	pool.Selector = map[string]string{"app": "m"}
	pool.TargetPorts = []int{8000}
	if err := ds.PoolSet(ctx, reader, pool); err != nil {
		t.Fatal(err)
	}
	// Reconciler path.
	ds.PodUpdateOrAddIfNotExist(ctx, readyPod("reconciled", "10.0.0.2"))
	eps := ds.PodList(datastore.AllPodsPredicate)
	if len(eps) != 2 {
		t.Fatalf("got %d endpoints, want 2", len(eps))
	}
	for _, ep := range eps {
		m := ep.GetMetadata()
		if m.Labels[protocol.AnnotationLabelPrefix+"model.aibrix.ai/engine"] != "sglang" || m.Labels["app"] != "m" {
			t.Errorf("%s: labels %v lack the mirrored annotation", m.PodName, m.Labels)
		}
	}
}
