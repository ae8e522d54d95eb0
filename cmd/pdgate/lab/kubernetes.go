package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
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

// PoolName is the InferencePool the Kubernetes-mode lab creates (in Namespace).
const PoolName = "pdgate-lab"

const gieModule = "sigs.k8s.io/gateway-api-inference-extension"

var poolGVR = schema.GroupVersionResource{Group: "inference.networking.k8s.io", Version: "v1", Resource: "inferencepools"}

// kubeLab is the local control plane of `pdgate lab --kubernetes`: kube-apiserver and etcd
// from the envtest binaries, GIE's CRDs installed, the pool and pods created through the API.
type kubeLab struct {
	env        *envtest.Environment
	kubeconfig string
}

// DefaultKubeAssets is where the envtest binaries are looked for: $KUBEBUILDER_ASSETS, else
// bin/envtest (hack/build-envtest.sh).
func DefaultKubeAssets() string {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d
	}
	return filepath.Join("bin", "envtest")
}

// DefaultCRDDir is config/crd/bases of the GIE module version this binary was built with, in
// the Go module cache.
func DefaultCRDDir() string {
	version := "v1.5.0"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == gieModule {
				version = d.Version
				if d.Replace != nil {
					version = d.Replace.Version
				}
			}
		}
	}
	cache := os.Getenv("GOMODCACHE")
	if cache == "" {
		gopath := os.Getenv("GOPATH")
		if gopath == "" {
			home, _ := os.UserHomeDir()
			gopath = filepath.Join(home, "go")
		}
		cache = filepath.Join(gopath, "pkg", "mod")
	}
	return filepath.Join(cache, gieModule+"@"+version, "config", "crd", "bases")
}

// checkKubeFiles fails early, with the fix, when a file the control plane needs is missing.
func checkKubeFiles(assets, crdDir string) error {
	for _, b := range []string{"kube-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(assets, b)); err != nil {
			return fmt.Errorf("--kubernetes: no %s in %s (build it with hack/build-envtest.sh, or set --kubebuilder-assets / KUBEBUILDER_ASSETS)", b, assets)
		}
	}
	if _, err := os.Stat(filepath.Join(crdDir, "inference.networking.k8s.io_inferencepools.yaml")); err != nil {
		return fmt.Errorf("--kubernetes: GIE's InferencePool CRD not found in %s (run `go mod download %s`, or set --crd-dir)", crdDir, gieModule)
	}
	return nil
}

// startKube starts the control plane, installs GIE's CRDs, writes an admin kubeconfig into the
// run directory and creates the InferencePool pointing at the lab's EPP.
func startKube(ctx context.Context, p *Plan, assets, crdDir string) (*kubeLab, error) {
	if err := checkKubeFiles(assets, crdDir); err != nil {
		return nil, err
	}
	k := &kubeLab{env: &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        []string{crdDir},
		ErrorIfCRDPathMissing:    true,
		ControlPlaneStartTimeout: 2 * time.Minute,
		ControlPlaneStopTimeout:  time.Minute,
	}}
	cfg, err := k.env.Start()
	if err != nil {
		return nil, fmt.Errorf("starting kube-apiserver and etcd from %s: %w", assets, err)
	}
	user, err := k.env.AddUser(envtest.User{Name: "pdgate-lab", Groups: []string{"system:masters"}}, nil)
	if err == nil {
		var data []byte
		if data, err = user.KubeConfig(); err == nil {
			k.kubeconfig = filepath.Join(p.Dir, "kubeconfig")
			err = os.WriteFile(k.kubeconfig, data, 0o600)
		}
	}
	if err != nil {
		k.stop()
		return nil, fmt.Errorf("writing the lab's kubeconfig: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err == nil {
		_, err = dyn.Resource(poolGVR).Namespace(Namespace).Create(ctx, p.InferencePool(), metav1.CreateOptions{FieldValidation: "Strict"})
	}
	if err != nil {
		k.stop()
		return nil, fmt.Errorf("creating InferencePool %s: %w", PoolName, err)
	}
	for _, o := range p.InferenceObjectives() {
		if _, err := dyn.Resource(objectiveGVR).Namespace(Namespace).Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			k.stop()
			return nil, fmt.Errorf("creating InferenceObjective %s: %w", o.GetName(), err)
		}
	}
	return k, nil
}

// createPods creates every pod through the API and reports it Running and Ready with its
// loopback IP through the status subresource, as a kubelet would once its containers are up.
func (k *kubeLab) createPods(ctx context.Context, p *Plan) error {
	cfg := k.env.Config
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	for _, pod := range p.KubePods() {
		created, err := cs.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating pod %s: %w", pod.Name, err)
		}
		created.Status = pod.Status
		if _, err := cs.CoreV1().Pods(Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("pod %s status: %w", pod.Name, err)
		}
	}
	return nil
}

func (k *kubeLab) stop() {
	if k != nil && k.env != nil {
		_ = k.env.Stop()
	}
}

// InferencePool is the lab's pool: every lab pod by label, one target port (the pods' EPP
// endpoint), the EPP's gRPC port as the endpoint picker.
func (p *Plan) InferencePool() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": poolGVR.GroupVersion().String(), "kind": "InferencePool",
		"metadata": map[string]any{"name": PoolName, "namespace": Namespace},
		"spec": map[string]any{
			"selector":    map[string]any{"matchLabels": map[string]any{"app": "pdgate-lab"}},
			"targetPorts": []any{map[string]any{"number": int64(EnginePort)}},
			"endpointPickerRef": map[string]any{
				"name": "pdgate-lab-epp", "port": map[string]any{"number": int64(p.EPPGRPCPort)},
			},
		},
	}}
}

// KubePods are the Pod objects of the lab's pods, with the status a kubelet would report:
// Running, Ready, the pod's loopback IP.
func (p *Plan) KubePods() []*corev1.Pod {
	var out []*corev1.Pod
	for _, pod := range p.Pods {
		var ports []corev1.ContainerPort
		ports = append(ports, corev1.ContainerPort{Name: "engine", ContainerPort: int32(pod.enginePort)})
		containers := []corev1.Container{{Name: "engine", Image: "pdgate/sim:lab", Ports: ports}}
		if pod.HasSidecar() {
			containers = append(containers, corev1.Container{Name: "pdgate-sidecar", Image: "pdgate/sidecar:lab",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: int32(pod.sidecarPort)}}})
		}
		now := metav1.Now()
		out = append(out, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: Namespace, Labels: p.Labels(pod), Annotations: p.Annotations(pod)},
			Spec:       corev1.PodSpec{Containers: containers},
			Status: corev1.PodStatus{
				Phase: corev1.PodRunning, PodIP: pod.IP, PodIPs: []corev1.PodIP{{IP: pod.IP}},
				Conditions: []corev1.PodCondition{
					{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
					{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				},
			},
		})
	}
	return out
}

// kubeEPPArgs are the EPP's flags in Kubernetes mode: the standalone lab's ports and flags,
// with the pool instead of an endpoints file.
func (p *Plan) kubeEPPArgs() []string {
	t := p.Topology
	args := []string{
		"--pool-name", PoolName, "--pool-namespace", Namespace, "--config-file", t.Path(t.EPPConfig),
		"--grpc-port", strconv.Itoa(p.EPPGRPCPort), "--grpc-health-port", strconv.Itoa(p.EPPHealthPort),
		"--metrics-port", strconv.Itoa(p.EPPMetricsPort), "--secure-serving=" + strconv.FormatBool(p.EPPTLS),
		"--allow-decision-trace=true",
		// Sidecars report the end of each prefill leg here, so the ledger's prefill charge
		// ends with the leg (not with the response headers).
		"--prefill-release-address=" + p.PrefillReleaseAddress(),
	}
	return append(args, t.EPPArgs...)
}

// kubeProcs turns the standalone process list into the Kubernetes-mode one: the EPP watches
// the pool through the local API server with the lab's kubeconfig, and so do the sidecars'
// allow-lists (ready pool pods on the target port), except SGLang's: its prefill bootstrap
// listener is not a pool port, so SGLang sidecars keep the static list.
func (p *Plan) kubeProcs(kubeconfig string) []ProcSpec {
	procs := p.Procs("")
	for i := range procs {
		spec := &procs[i]
		switch {
		case spec.Name == "epp":
			spec.Args = p.kubeEPPArgs()
			spec.Env = []string{"KUBECONFIG=" + kubeconfig, "NAMESPACE=" + Namespace, "POD_NAME=pdgate-lab-epp"}
		case strings.HasPrefix(spec.Name, "sidecar-"):
			if pod := p.byName[strings.TrimPrefix(spec.Name, "sidecar-")]; pod != nil && pod.Engine != EngineSGLang {
				spec.Args = poolAllowlist(spec.Args, kubeconfig)
			}
		}
	}
	return procs
}

// poolAllowlist replaces a sidecar's --allowlist by the lab's InferencePool.
func poolAllowlist(args []string, kubeconfig string) []string {
	out := make([]string, 0, len(args)+2)
	for i := 0; i < len(args); i++ {
		if args[i] == "--allowlist" && i+1 < len(args) {
			i++
			continue
		}
		out = append(out, args[i])
	}
	return append(out, "--inference-pool", Namespace+"/"+PoolName, "--kubeconfig", kubeconfig)
}
