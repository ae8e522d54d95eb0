package lab

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/pdgate/pdgate/cmd/internal/controlplane"
)

// PoolName is the InferencePool the Kubernetes-mode lab creates (in Namespace).
const PoolName = "pdgate-lab"

// kubeLab is the local control plane of `pdgate lab --kubernetes`: kube-apiserver and etcd
// from the envtest binaries, GIE's CRDs installed, the pool and pods created through the API.
type kubeLab struct {
	cp         *controlplane.ControlPlane
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
			if d.Path == controlplane.GIEModule {
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
	return filepath.Join(cache, controlplane.GIEModule+"@"+version, "config", "crd", "bases")
}

// checkKubeFiles fails early, with the fix, when a file the control plane needs is missing.
func checkKubeFiles(assets, crdDir string) error {
	if err := controlplane.MissingBinary(assets); err != nil {
		return fmt.Errorf("--kubernetes: %w (build it with hack/build-envtest.sh, or set --kubebuilder-assets / KUBEBUILDER_ASSETS)", err)
	}
	if _, err := os.Stat(filepath.Join(crdDir, "inference.networking.k8s.io_inferencepools.yaml")); err != nil {
		return fmt.Errorf("--kubernetes: GIE's InferencePool CRD not found in %s (run `go mod download %s`, or set --crd-dir)", crdDir, controlplane.GIEModule)
	}
	return nil
}

// startKube starts the control plane, installs GIE's CRDs, writes an admin kubeconfig into the
// run directory and creates the InferencePool pointing at the lab's EPP.
func startKube(ctx context.Context, p *Plan, assets, crdDir string) (*kubeLab, error) {
	if err := checkKubeFiles(assets, crdDir); err != nil {
		return nil, err
	}
	k := &kubeLab{kubeconfig: filepath.Join(p.Dir, "kubeconfig")}
	var err error
	if k.cp, err = controlplane.Start(controlplane.Options{Assets: assets, CRDDir: crdDir, User: "pdgate-lab", Kubeconfig: k.kubeconfig}); err != nil {
		return nil, err
	}
	if err := k.cp.CreatePool(ctx, p.InferencePool()); err != nil {
		k.stop()
		return nil, err
	}
	for _, o := range p.InferenceObjectives() {
		if _, err := k.cp.Dynamic.Resource(objectiveGVR).Namespace(Namespace).Create(ctx, o, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			k.stop()
			return nil, fmt.Errorf("creating InferenceObjective %s: %w", o.GetName(), err)
		}
	}
	return k, nil
}

// createPods creates every pod through the API and reports it Running and Ready with its
// loopback IP through the status subresource, as a kubelet would once its containers are up.
func (k *kubeLab) createPods(ctx context.Context, p *Plan) error {
	for _, pod := range p.KubePods() {
		if err := k.cp.CreatePod(ctx, pod); err != nil {
			return err
		}
	}
	return nil
}

func (k *kubeLab) stop() {
	if k != nil && k.cp != nil {
		_ = k.cp.Stop()
	}
}

// InferencePool is the lab's pool: every lab pod by label, one target port (the pods' EPP
// endpoint), the EPP's gRPC port as the endpoint picker.
func (p *Plan) InferencePool() *unstructured.Unstructured {
	return controlplane.InferencePool(Namespace, PoolName, map[string]string{"app": "pdgate-lab"}, EnginePort, "pdgate-lab-epp", p.EPPGRPCPort)
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
		out = append(out, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: Namespace, Labels: p.Labels(pod), Annotations: p.Annotations(pod)},
			Spec:       corev1.PodSpec{Containers: containers},
			Status:     controlplane.RunningStatus(pod.IP),
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
