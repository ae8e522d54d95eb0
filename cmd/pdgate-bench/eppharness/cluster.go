package eppharness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// PoolLabel selects a harness pool's pods (value: the pool name).
const PoolLabel = "bench.pdgate.io/pool"

var poolGVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// ClusterOptions locate the control plane's files.
type ClusterOptions struct {
	// Assets holds kube-apiserver and etcd (hack/build-envtest.sh); "" = $KUBEBUILDER_ASSETS,
	// else <repo>/bin/envtest.
	Assets string
	// CRDDir holds GIE's CRDs; "" = config/crd/bases of GIE's module in the module cache.
	CRDDir string
	// WorkDir receives the admin kubeconfig; "" = a temporary directory.
	WorkDir string
}

// Cluster is a local control plane (kube-apiserver + etcd from the envtest binaries) with GIE's
// CRDs installed. Each EPP gets a namespace of its own holding its InferencePool and pods, so
// EPPs sharing a cluster never cache each other's pods (GIE's manager caches every Pod of the
// pool's namespace).
type Cluster struct {
	Kubeconfig string

	env     *envtest.Environment
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	tmp     string
	mu      sync.Mutex
	nextNS  int
	stopped bool
}

// StartCluster starts kube-apiserver and etcd and installs GIE's CRDs.
func StartCluster(o ClusterOptions) (*Cluster, error) {
	if o.Assets == "" {
		o.Assets = os.Getenv("KUBEBUILDER_ASSETS")
	}
	if o.Assets == "" {
		root, err := RepoRoot()
		if err != nil {
			return nil, err
		}
		o.Assets = filepath.Join(root, "bin", "envtest")
	}
	if o.CRDDir == "" {
		dir, err := gieModuleDir()
		if err != nil {
			return nil, err
		}
		o.CRDDir = filepath.Join(dir, "config", "crd", "bases")
	}
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(o.Assets, b)); err != nil {
			return nil, fmt.Errorf("no %s in %s (build it with hack/build-envtest.sh or set KUBEBUILDER_ASSETS)", b, o.Assets)
		}
	}
	c := &Cluster{env: &envtest.Environment{
		BinaryAssetsDirectory:    o.Assets,
		CRDDirectoryPaths:        []string{o.CRDDir},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}}
	cfg, err := c.env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", o.Assets, err)
	}
	fail := func(err error) (*Cluster, error) { _ = c.Stop(); return nil, err }
	if c.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return fail(fmt.Errorf("kubernetes client: %w", err))
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return fail(fmt.Errorf("dynamic client: %w", err))
	}
	dir := o.WorkDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "pdgate-eppharness-"); err != nil {
			return fail(err)
		}
		c.tmp = dir
	}
	user, err := c.env.AddUser(envtest.User{Name: "pdgate-bench", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fail(fmt.Errorf("adding the bench's API user: %w", err))
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fail(fmt.Errorf("kubeconfig: %w", err))
	}
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(c.Kubeconfig, kc, 0o600); err != nil {
		return fail(fmt.Errorf("writing kubeconfig: %w", err))
	}
	return c, nil
}

// Stop stops the control plane (idempotent).
func (c *Cluster) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil
	}
	c.stopped = true
	err := c.env.Stop()
	if c.tmp != "" {
		_ = os.RemoveAll(c.tmp)
	}
	if err != nil {
		return fmt.Errorf("stopping kube-apiserver and etcd: %w", err)
	}
	return nil
}

// pool is one EPP's namespace, InferencePool and pods.
type pool struct {
	Namespace, Name string
}

// createPool makes a fresh namespace with an InferencePool named name selecting the given
// endpoints' pods (all on one target port), created Running and Ready with their IP as a
// kubelet would report them.
func (c *Cluster) createPool(ctx context.Context, name string, eppPort int, eps []Endpoint) (pool, error) {
	port, err := commonTargetPort(eps)
	if err != nil {
		return pool{}, err
	}
	c.mu.Lock()
	c.nextNS++
	ns := fmt.Sprintf("bench-%d", c.nextNS)
	c.mu.Unlock()
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return pool{}, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	p := pool{Namespace: ns, Name: name}
	if _, err := c.dyn.Resource(poolGVR).Namespace(ns).Create(ctx, inferencePool(ns, name, port, eppPort), metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		return p, fmt.Errorf("creating InferencePool %s/%s: %w", ns, name, err)
	}
	// A few writers in parallel: 512 pods take two API calls each.
	errs := make(chan error, len(eps))
	work := make(chan Endpoint)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ep := range work {
				errs <- c.createPod(ctx, podFor(ns, name, ep))
			}
		}()
	}
	for _, ep := range eps {
		work <- ep
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return p, err
		}
	}
	return p, nil
}

func (c *Cluster) createPod(ctx context.Context, pod *corev1.Pod) error {
	status := pod.Status
	created, err := c.kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	created.Status = status
	if _, err := c.kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("pod %s/%s status: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}

// deletePool removes the pool's pods and the pool (envtest runs no namespace controller, so the
// namespace itself stays, empty).
func (c *Cluster) deletePool(ctx context.Context, p pool) error {
	err := c.kube.CoreV1().Pods(p.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
		metav1.ListOptions{LabelSelector: PoolLabel + "=" + p.Name})
	if err2 := c.dyn.Resource(poolGVR).Namespace(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err == nil {
		err = err2
	}
	if err != nil {
		return fmt.Errorf("deleting pool %s/%s: %w", p.Namespace, p.Name, err)
	}
	return nil
}

func commonTargetPort(eps []Endpoint) (int, error) {
	if len(eps) == 0 {
		return 0, fmt.Errorf("no endpoints")
	}
	port := eps[0].Port
	for _, ep := range eps {
		if ep.Port != port {
			return 0, fmt.Errorf("endpoint %s: port %d, but an InferencePool has one target port (%d): give every endpoint the same port on its own address", ep.Name, ep.Port, port)
		}
	}
	return port, nil
}

// inferencePool is a pool selecting PoolLabel=name on targetPort, with the EPP's gRPC port as
// its endpoint picker.
func inferencePool(ns, name string, targetPort, eppPort int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": poolGVR.GroupVersion().String(), "kind": "InferencePool",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": map[string]any{PoolLabel: name}},
			"targetPorts":       []any{map[string]any{"number": int64(targetPort)}},
			"endpointPickerRef": map[string]any{"name": name + "-epp", "port": map[string]any{"number": int64(eppPort)}},
		},
	}}
}

// podFor is the endpoint's Pod with the status a kubelet reports once its containers are up.
func podFor(ns, poolName string, ep Endpoint) *corev1.Pod {
	labels := map[string]string{PoolLabel: poolName}
	for k, v := range ep.Labels {
		labels[k] = v
	}
	now := metav1.Now()
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ep.Name, Namespace: ns, Labels: labels, Annotations: ep.Annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "pdgate/fake-engine:bench",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(ep.Port)}}}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ep.Address, PodIPs: []corev1.PodIP{{IP: ep.Address}},
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			},
		},
	}
}
