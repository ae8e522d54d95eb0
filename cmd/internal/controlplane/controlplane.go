// Package controlplane is the local Kubernetes control plane that `pdgate lab --kubernetes` and
// pdgate-bench's EPP harness run their EPPs and sidecars against: kube-apiserver and etcd from
// the envtest binaries with GIE's CRDs installed, an admin kubeconfig on disk for the processes
// they start, and the objects they create in it. No kubelet runs, so a Pod is created and then
// given the status a kubelet would report once its containers are up.
package controlplane

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// GIEModule is the module whose CRDs the control plane installs.
const GIEModule = "sigs.k8s.io/gateway-api-inference-extension"

// PoolGVR is GIE's InferencePool resource.
var PoolGVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// Options locate the control plane's files and name its admin.
type Options struct {
	// Assets holds kube-apiserver and etcd (hack/build-envtest.sh).
	Assets string
	// CRDDir holds GIE's CRDs.
	CRDDir string
	// User is the admin user (group system:masters) whose kubeconfig is written to Kubeconfig.
	User       string
	Kubeconfig string
}

// ControlPlane is a running kube-apiserver and etcd with admin clients.
type ControlPlane struct {
	Env     *envtest.Environment
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

// MissingBinary names the first of kube-apiserver and etcd that assets lacks; nil when both are
// there. Callers add how their users provide them.
func MissingBinary(assets string) error {
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return fmt.Errorf("no %s in %s", b, assets)
		}
	}
	return nil
}

// GIEModuleDir is the directory of the GIE module the build in dir uses ("" = the working
// directory), as `go list -m` finds it in the module cache; its CRDs are in config/crd/bases.
func GIEModuleDir(dir string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", GIEModule)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locating %s in the module cache (go list -m): %w", GIEModule, err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" {
		return "", fmt.Errorf("%s is not downloaded: run `go mod download %s`", GIEModule, GIEModule)
	}
	return mod, nil
}

// Start starts kube-apiserver and etcd, installs the CRDs and writes the admin kubeconfig. On
// an error nothing is left running.
func Start(o Options) (*ControlPlane, error) {
	c := &ControlPlane{Env: &envtest.Environment{
		BinaryAssetsDirectory:    o.Assets,
		CRDDirectoryPaths:        []string{o.CRDDir},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}}
	cfg, err := c.Env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", o.Assets, err)
	}
	if err := c.connect(o); err != nil {
		_ = c.Stop()
		return nil, err
	}
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	if c.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("dynamic client: %w", err)
	}
	return c, nil
}

// connect adds the admin user and writes its kubeconfig.
func (c *ControlPlane) connect(o Options) error {
	user, err := c.Env.AddUser(envtest.User{Name: o.User, Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return fmt.Errorf("adding the API user %s: %w", o.User, err)
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig of %s: %w", o.User, err)
	}
	if err := os.WriteFile(o.Kubeconfig, kc, 0o600); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return nil
}

// Stop stops kube-apiserver and etcd.
func (c *ControlPlane) Stop() error {
	if err := c.Env.Stop(); err != nil {
		return fmt.Errorf("stopping kube-apiserver and etcd: %w", err)
	}
	return nil
}

// InferencePool is a pool in ns selecting the pods labelled selector on one target port, with
// the EPP Service epp on eppPort as its endpoint picker.
func InferencePool(ns, name string, selector map[string]string, targetPort int, epp string, eppPort int) *unstructured.Unstructured {
	match := make(map[string]any, len(selector))
	for k, v := range selector {
		match[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": PoolGVR.GroupVersion().String(), "kind": "InferencePool",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"selector":          map[string]any{"matchLabels": match},
			"targetPorts":       []any{map[string]any{"number": int64(targetPort)}},
			"endpointPickerRef": map[string]any{"name": epp, "port": map[string]any{"number": int64(eppPort)}},
		},
	}}
}

// CreatePool creates an InferencePool, validated strictly against GIE's CRD.
func (c *ControlPlane) CreatePool(ctx context.Context, pool *unstructured.Unstructured) error {
	if _, err := c.Dynamic.Resource(PoolGVR).Namespace(pool.GetNamespace()).Create(ctx, pool, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		return fmt.Errorf("creating InferencePool %s/%s: %w", pool.GetNamespace(), pool.GetName(), err)
	}
	return nil
}

// RunningStatus is what a kubelet reports for a pod whose containers are up: Running and Ready
// on ip.
func RunningStatus(ip string) corev1.PodStatus {
	now := metav1.Now()
	return corev1.PodStatus{
		Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		},
	}
}

// CreatePod creates pod and then writes its status through the status subresource, since
// Create keeps none of it.
func (c *ControlPlane) CreatePod(ctx context.Context, pod *corev1.Pod) error {
	status := pod.Status
	created, err := c.Kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	created.Status = status
	if _, err := c.Kube.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("pod %s/%s status: %w", pod.Namespace, pod.Name, err)
	}
	return nil
}
