package podmeta

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/datastore"
)

// WrapDatastore returns a datastore that mirrors pod annotations into endpoint labels for
// every pod written to it: by the Pod reconciler (PodUpdateOrAddIfNotExist) and by the pool
// resync GIE runs inside PoolSet (through the reader it lists pods with).
func WrapDatastore(ds datastore.Datastore) datastore.Datastore { return &mirroring{Datastore: ds} }

type mirroring struct{ datastore.Datastore }

func (m *mirroring) PodUpdateOrAddIfNotExist(ctx context.Context, pod *corev1.Pod) bool {
	return m.Datastore.PodUpdateOrAddIfNotExist(ctx, mirrorPod(pod))
}

func (m *mirroring) PoolSet(ctx context.Context, reader client.Reader, pool *datalayer.EndpointPool) error {
	if reader != nil {
		reader = &mirroringReader{Reader: reader}
	}
	return m.Datastore.PoolSet(ctx, reader, pool)
}

func mirrorPod(pod *corev1.Pod) *corev1.Pod {
	if pod == nil || len(pod.Annotations) == 0 {
		return pod
	}
	cp := pod.DeepCopy()
	cp.Labels = MirrorAnnotations(pod.Labels, pod.Annotations)
	return cp
}

// mirroringReader mirrors annotations on pods listed by GIE's resync. The list is already
// selected by the pool's label selector, so extra labels cannot change membership.
type mirroringReader struct{ client.Reader }

func (r *mirroringReader) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if err := r.Reader.List(ctx, list, opts...); err != nil {
		return err
	}
	if pods, ok := list.(*corev1.PodList); ok {
		for i := range pods.Items {
			if len(pods.Items[i].Annotations) > 0 {
				pods.Items[i].Labels = MirrorAnnotations(pods.Items[i].Labels, pods.Items[i].Annotations)
			}
		}
	}
	return nil
}
