package eppharness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pdgate/pdgate/cmd/internal/controlplane"
)

// PoolLabel selects a harness pool's pods (value: the pool name).
const PoolLabel = "bench.pdgate.io/pool"

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

	cp      *controlplane.ControlPlane
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
	if err := controlplane.MissingBinary(o.Assets); err != nil {
		return nil, fmt.Errorf("%w (build it with hack/build-envtest.sh or set KUBEBUILDER_ASSETS)", err)
	}
	c := &Cluster{}
	dir := o.WorkDir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "pdgate-eppharness-"); err != nil {
			return nil, err
		}
		c.tmp = dir
	}
	c.Kubeconfig = filepath.Join(dir, "kubeconfig")
	var err error
	if c.cp, err = controlplane.Start(controlplane.Options{Assets: o.Assets, CRDDir: o.CRDDir, User: "pdgate-bench", Kubeconfig: c.Kubeconfig}); err != nil {
		if c.tmp != "" {
			_ = os.RemoveAll(c.tmp)
		}
		return nil, err
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
	err := c.cp.Stop()
	if c.tmp != "" {
		_ = os.RemoveAll(c.tmp)
	}
	return err
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
	if _, err := c.cp.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return pool{}, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	p := pool{Namespace: ns, Name: name}
	if err := c.cp.CreatePool(ctx, inferencePool(ns, name, port, eppPort)); err != nil {
		return p, err
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
				errs <- c.cp.CreatePod(ctx, podFor(ns, name, ep))
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

// deletePool removes the pool's pods and the pool (envtest runs no namespace controller, so the
// namespace itself stays, empty).
func (c *Cluster) deletePool(ctx context.Context, p pool) error {
	err := c.cp.Kube.CoreV1().Pods(p.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: new(int64)},
		metav1.ListOptions{LabelSelector: PoolLabel + "=" + p.Name})
	if err2 := c.cp.Dynamic.Resource(controlplane.PoolGVR).Namespace(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{}); err == nil {
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
	return controlplane.InferencePool(ns, name, map[string]string{PoolLabel: name}, targetPort, name+"-epp", eppPort)
}

// podFor is the endpoint's Pod with the status a kubelet reports once its containers are up.
func podFor(ns, poolName string, ep Endpoint) *corev1.Pod {
	labels := map[string]string{PoolLabel: poolName}
	for k, v := range ep.Labels {
		labels[k] = v
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: ep.Name, Namespace: ns, Labels: labels, Annotations: ep.Annotations},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "engine", Image: "pdgate/fake-engine:bench",
			Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(ep.Port)}}}}},
		Status: controlplane.RunningStatus(ep.Address),
	}
}
