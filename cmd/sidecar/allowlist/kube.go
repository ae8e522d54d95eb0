package allowlist

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// PoolGVR is the GA InferencePool resource, read as unstructured so the sidecar needs no GIE
// types.
var PoolGVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// ParsePoolRef parses --inference-pool: "namespace/name" or "name" (namespace "default").
func ParsePoolRef(s string) (namespace, name string, err error) {
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 1 && parts[0] != "":
		return "default", parts[0], nil
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return parts[0], parts[1], nil
	}
	return "", "", fmt.Errorf("--inference-pool %q: want namespace/name or name", s)
}

const ipIndex = "podIP"

// Kube allows the ready pods of one InferencePool on the pool's target ports. Membership is
// evaluated at lookup time against the current pool spec, so a changed selector or port list
// takes effect without restarting any watch.
type Kube struct {
	namespace, name string
	log             logr.Logger

	pools cache.SharedIndexInformer
	pods  cache.SharedIndexInformer

	mu       sync.RWMutex
	selector labels.Selector
	ports    map[int]bool
}

// NewKube builds the watcher; Start runs it.
func NewKube(kc kubernetes.Interface, dc dynamic.Interface, namespace, name string, log logr.Logger) *Kube {
	k := &Kube{namespace: namespace, name: name, log: log, selector: labels.Nothing()}
	df := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dc, 30*time.Second, namespace,
		func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		})
	k.pools = df.ForResource(PoolGVR).Informer()
	pf := informers.NewSharedInformerFactoryWithOptions(kc, 30*time.Second, informers.WithNamespace(namespace))
	k.pods = pf.Core().V1().Pods().Informer()
	_ = k.pods.AddIndexers(cache.Indexers{ipIndex: func(obj any) ([]string, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, nil
		}
		var ips []string
		for _, ip := range p.Status.PodIPs {
			ips = append(ips, canonicalIP(ip.IP))
		}
		if len(ips) == 0 && p.Status.PodIP != "" {
			ips = append(ips, canonicalIP(p.Status.PodIP))
		}
		return ips, nil
	}})
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.updatePool(obj) },
		UpdateFunc: func(_, obj any) { k.updatePool(obj) },
		DeleteFunc: func(any) { k.setPool(labels.Nothing(), nil) },
	}
	_, _ = k.pools.AddEventHandler(handler)
	return k
}

// Start runs the informers until run ends and waits until both caches are synced or
// syncCtx ends.
func (k *Kube) Start(run, syncCtx context.Context) error {
	go k.pools.Run(run.Done())
	go k.pods.Run(run.Done())
	if !cache.WaitForCacheSync(syncCtx.Done(), k.pools.HasSynced, k.pods.HasSynced) {
		return fmt.Errorf("allow-list: caches for InferencePool %s/%s and its pods did not sync (check RBAC: get/list/watch inferencepools and pods in %s)", k.namespace, k.name, k.namespace)
	}
	return nil
}

func (k *Kube) updatePool(obj any) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok || u.GetName() != k.name {
		return
	}
	sel, ports, err := poolMembership(u)
	if err != nil {
		k.log.Error(err, "InferencePool spec unusable; allow-list is empty", "pool", k.namespace+"/"+k.name)
		k.setPool(labels.Nothing(), nil)
		return
	}
	k.log.V(1).Info("allow-list pool updated", "selector", sel.String(), "ports", ports)
	k.setPool(sel, ports)
}

func (k *Kube) setPool(sel labels.Selector, ports map[int]bool) {
	k.mu.Lock()
	k.selector, k.ports = sel, ports
	k.mu.Unlock()
}

// poolMembership reads spec.selector.matchLabels and spec.targetPorts[].number of a v1 pool.
func poolMembership(u *unstructured.Unstructured) (labels.Selector, map[int]bool, error) {
	ml, found, err := unstructured.NestedStringMap(u.Object, "spec", "selector", "matchLabels")
	if err != nil || !found || len(ml) == 0 {
		return nil, nil, fmt.Errorf("spec.selector.matchLabels missing or invalid: %v", err)
	}
	tps, found, err := unstructured.NestedSlice(u.Object, "spec", "targetPorts")
	if err != nil || !found || len(tps) == 0 {
		return nil, nil, fmt.Errorf("spec.targetPorts missing or invalid: %v", err)
	}
	ports := map[int]bool{}
	for _, tp := range tps {
		m, ok := tp.(map[string]any)
		if !ok {
			return nil, nil, fmt.Errorf("spec.targetPorts item is %T", tp)
		}
		n, found, err := unstructured.NestedInt64(m, "number")
		if err != nil || !found || n < 1 || n > 65535 {
			return nil, nil, fmt.Errorf("spec.targetPorts[].number invalid: %v", m["number"])
		}
		ports[int(n)] = true
	}
	return labels.SelectorFromSet(ml), ports, nil
}

// Allowed implements Checker: the host must be the IP of a running, not deleted pod that the
// pool selects, and the port one of the pool's target ports. DNS names are never allowed in
// this mode (they could resolve anywhere).
func (k *Kube) Allowed(hp protocol.HostPort) bool {
	k.mu.RLock()
	sel, ports := k.selector, k.ports
	k.mu.RUnlock()
	if !ports[hp.Port] {
		return false
	}
	objs, err := k.pods.GetIndexer().ByIndex(ipIndex, canonicalIP(hp.Host))
	if err != nil {
		return false
	}
	for _, o := range objs {
		p, ok := o.(*corev1.Pod)
		if !ok || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		if sel.Matches(labels.Set(p.Labels)) {
			return true
		}
	}
	return false
}

func canonicalIP(s string) string {
	if ip := net.ParseIP(s); ip != nil {
		return ip.String()
	}
	return "invalid:" + s
}
