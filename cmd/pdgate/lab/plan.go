package lab

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/pdgate/pdgate/cmd/epp/endpoints"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Fixed in-pod ports: every pod has its own loopback IP, so pods share port numbers the way
// Kubernetes pods do (the EPP's subset hint matches on IP, so IPs must be distinct).
const (
	EnginePort    = 8000
	SidecarPort   = 8001
	BootstrapPort = 8998
	// Namespace is the namespace the lab's endpoints live in (the EPP's default pool namespace).
	Namespace = "default"
	// KubeEnginePort is the engine port of decode-capable pods in Kubernetes mode, where the
	// sidecar takes the pool's single target port (EnginePort), as in llm-d's layout.
	KubeEnginePort = 8200
)

// Pod is one expanded lab pod.
type Pod struct {
	Name          string
	Role          string
	Roleset       string
	Engine        string
	IP            string
	BootstrapPort int // SGLang prefill pods
	Spec          *PodSpec
	// enginePort and sidecarPort depend on the mode (NewPlan): standalone uses EnginePort
	// and SidecarPort; Kubernetes mode puts every pod's EPP endpoint on the pool's one target
	// port (EnginePort) and moves decode-capable engines to KubeEnginePort.
	enginePort, sidecarPort int
	dpSize                  int // data-parallel ranks (dataparallel.go)
}

// HasSidecar reports whether the pod gets a routing sidecar.
func (p Pod) HasSidecar() bool { return DecodeCapable(p.Role) }

// EngineAddr is the simulator's address.
func (p Pod) EngineAddr() string { return protocol.FormatHostPort(p.IP, strconv.Itoa(p.enginePort)) }

// EnginePortNumber is the port the pod's simulator listens on.
func (p Pod) EnginePortNumber() int { return p.enginePort }

// Endpoint is the address the EPP sees: the sidecar for decode-capable pods.
func (p Pod) Endpoint() string {
	if p.HasSidecar() {
		return protocol.FormatHostPort(p.IP, strconv.Itoa(p.sidecarPort))
	}
	return p.EngineAddr()
}

// Plan is a topology laid out on this machine.
type Plan struct {
	Topology *Topology
	Pods     []Pod
	// Subnet is the first three octets of the pods' loopback addresses.
	Subnet string
	// Addresses of the lab's own services.
	GatewayAddr, GatewayAdminAddr string
	EPPGRPCPort, EPPHealthPort    int
	EPPMetricsPort                int
	Dir                           string // run directory: generated files and logs
	BinDir                        string
	EPPTLS                        bool
	byName                        map[string]*Pod
	byEndpoint                    map[string]*Pod
}

// PlanOptions chooses where the lab lives.
type PlanOptions struct {
	// Subnet is "127.x.y"; pods get 127.x.y.10 upward.
	Subnet string
	// GatewayPort is the client-facing port on 127.0.0.1 (0 picks a free one).
	GatewayPort int
	// Dir is the run directory (generated files, logs).
	Dir string
	// BinDir holds sim, sidecar, epp and gateway.
	BinDir string
	// Kubernetes lays pods out for an InferencePool: one target port (EnginePort) on every
	// pod, the sidecar's on decode-capable pods.
	Kubernetes bool
}

// NewPlan expands the topology's pod groups into pods with addresses and picks free ports
// for the EPP and the gateway's admin listener.
func NewPlan(t *Topology, o PlanOptions) (*Plan, error) {
	if o.Subnet == "" {
		o.Subnet = "127.0.10"
	}
	if ip := net.ParseIP(o.Subnet + ".1"); ip == nil || ip.To4() == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("--subnet %q: want three octets inside 127.0.0.0/8, e.g. 127.0.10", o.Subnet)
	}
	if len(t.Objectives) > 0 && !o.Kubernetes {
		return nil, fmt.Errorf("topology %s: objectives need --kubernetes (the standalone EPP has no InferenceObjective source)", t.Name)
	}
	p := &Plan{Topology: t, Subnet: o.Subnet, Dir: o.Dir, BinDir: o.BinDir, EPPTLS: true,
		byName: map[string]*Pod{}, byEndpoint: map[string]*Pod{}}
	host := 10
	for i := range t.Pods {
		spec := &t.Pods[i]
		for n := 0; n < spec.Count; n++ {
			if host > 254 {
				return nil, fmt.Errorf("topology: too many pods for one /24 (max 245)")
			}
			pod := Pod{
				Name: fmt.Sprintf("%s-%d", spec.Name, n), Role: spec.Role, Roleset: spec.Roleset,
				Engine: spec.Engine, IP: fmt.Sprintf("%s.%d", o.Subnet, host), Spec: spec,
				enginePort: EnginePort, sidecarPort: SidecarPort,
			}
			if o.Kubernetes && DecodeCapable(spec.Role) {
				pod.enginePort, pod.sidecarPort = KubeEnginePort, EnginePort
			}
			if spec.DataParallelSize > 1 {
				if o.Kubernetes {
					return nil, fmt.Errorf("pod group %s: dataParallelSize needs the standalone lab (not --kubernetes)", spec.Name)
				}
				pod.dpSize = spec.DataParallelSize
				if DecodeCapable(spec.Role) {
					pod.enginePort, pod.sidecarPort = KubeEnginePort, EnginePort
				}
			}
			if spec.Engine == EngineSGLang && spec.Role == RolePrefill {
				pod.BootstrapPort = BootstrapPort
			}
			p.Pods = append(p.Pods, pod)
			host++
		}
	}
	for i := range p.Pods {
		p.byName[p.Pods[i].Name] = &p.Pods[i]
		p.byEndpoint[p.Pods[i].Endpoint()] = &p.Pods[i]
		p.byEndpoint[p.Pods[i].EngineAddr()] = &p.Pods[i]
		engines, endpoints := p.Pods[i].rankAddrs()
		for _, a := range append(engines, endpoints...) {
			p.byEndpoint[a] = &p.Pods[i]
		}
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	p.EPPGRPCPort, p.EPPHealthPort, p.EPPMetricsPort = ports[0], ports[1], ports[2]
	p.GatewayAdminAddr = "127.0.0.1:" + strconv.Itoa(ports[3])
	gp := o.GatewayPort
	if gp == 0 {
		fp, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		gp = fp[0]
	}
	p.GatewayAddr = "127.0.0.1:" + strconv.Itoa(gp)
	return p, nil
}

// PodByName finds a pod by name or by any of its addresses; GIE's Kubernetes-mode endpoint
// names ("<pod>-rank-<n>", one per target port) resolve to their pod.
func (p *Plan) PodByName(name string) *Pod {
	if pod := p.byName[name]; pod != nil {
		return pod
	}
	if pod := p.byEndpoint[name]; pod != nil {
		return pod
	}
	if i := strings.LastIndex(name, "-rank-"); i > 0 {
		if _, err := strconv.Atoi(name[i+len("-rank-"):]); err == nil {
			return p.byName[name[:i]]
		}
	}
	return nil
}

func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	var out []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		lns = append(lns, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// CheckPorts fails with a clear message when any address the lab needs is taken.
func (p *Plan) CheckPorts() error {
	addrs := []string{p.GatewayAddr, p.GatewayAdminAddr}
	for _, port := range []int{p.EPPGRPCPort, p.EPPHealthPort, p.EPPMetricsPort} {
		addrs = append(addrs, "127.0.0.1:"+strconv.Itoa(port))
	}
	addrs = append(addrs, p.podAddrs()...)
	var busy []string
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			busy = append(busy, a)
			continue
		}
		l.Close()
	}
	if len(busy) > 0 {
		return fmt.Errorf("port in use: %s (another lab running? stop it, or pick --port/--subnet)", strings.Join(busy, ", "))
	}
	return nil
}

// Labels returns the endpoint labels the EPP sees for a pod: llm-d and AIBrix role labels,
// the roleset, the engine (AIBrix and GIE's metrics mapping) and the KV connector.
func (p *Plan) Labels(pod Pod) map[string]string {
	llmdRole := map[string]string{RolePrefill: "prefill", RoleDecode: "decode", RoleCombined: "both", RoleEncode: "encode"}[pod.Role]
	gieEngine := map[string]string{EngineVLLM: "vllm", EngineSGLang: "sglang", EngineTRTLLM: "trtllm-serve"}[pod.Engine]
	l := map[string]string{
		"app":                       "pdgate-lab",
		podmodel.LabelLLMDRole:      llmdRole,
		podmodel.LabelModelName:     sanitizeLabel(p.Topology.Model),
		podmodel.LabelEngine:        pod.Engine,
		podmodel.LabelPort:          strconv.Itoa(pod.enginePort),
		podmodel.LabelGIEEngineType: gieEngine,
	}
	if pod.Role == RolePrefill || pod.Role == RoleDecode {
		l[podmodel.LabelRoleName] = pod.Role
		l[podmodel.LabelRolesetName] = pod.Roleset
	}
	// No model.aibrix.ai/kv-connector-type: AIBrix's "nixl" is the Neuron agent's protocol,
	// not the simulator's nixl (llm-d NIXL v2); each sidecar is started with its pod's
	// connector instead (--kv-connector).
	for k, v := range pod.Spec.Labels {
		l[k] = v
	}
	return l
}

// Annotations returns the pod annotations (the EPP mirrors them into labels).
func (p *Plan) Annotations(pod Pod) map[string]string {
	a := map[string]string{}
	if p.Topology.Model != "" {
		// Every simulator serves the topology's one model: the EPP answers any other 404.
		a[podmodel.AnnotationServedModels] = p.Topology.Model
	}
	if cfg := bucketAnnotation(*pod.Spec); cfg != "" {
		a[podmodel.AnnotationConfig] = cfg
	}
	if pod.BootstrapPort != 0 {
		a[podmodel.AnnotationBootstrap] = strconv.Itoa(pod.BootstrapPort)
	}
	for k, v := range pod.Spec.Annotations {
		a[k] = v
	}
	return a
}

func sanitizeLabel(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			b[i] = '-'
		}
	}
	if len(b) > 63 {
		b = b[len(b)-63:]
	}
	return strings.Trim(string(b), "-_.")
}

// EndpointsYAML renders the EPP's standalone endpoints file (cmd/epp/README.md) in the EPP's
// own types: one endpoint per pod, at the sidecar for decode-capable pods; metrics are scraped
// from the engine port.
func (p *Plan) EndpointsYAML() ([]byte, error) {
	f := endpoints.File{}
	for _, pod := range p.Pods {
		f.Endpoints = append(f.Endpoints, p.endpointRecords(pod)...)
	}
	b, err := yaml.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("rendering the endpoints file: %w", err)
	}
	return b, nil
}

// targets lists every address a sidecar may call (its allow-list): every pod's engine and
// EPP-visible endpoint (a combined pod may be picked for prefill at its sidecar) and, for
// SGLang prefill pods, the bootstrap listener.
func (p *Plan) targets() string {
	out := p.podAddrs()
	sort.Strings(out)
	return strings.Join(out, ",")
}

// podAddrs lists every address the pods listen on: engines (each data-parallel rank's
// too), sidecars and SGLang bootstrap listeners.
func (p *Plan) podAddrs() []string {
	var out []string
	for _, pod := range p.Pods {
		out = append(out, pod.EngineAddr())
		if pod.HasSidecar() {
			out = append(out, pod.Endpoint())
		}
		if pod.BootstrapPort != 0 {
			out = append(out, protocol.FormatHostPort(pod.IP, strconv.Itoa(pod.BootstrapPort)))
		}
		engines, _ := pod.rankAddrs()
		out = append(out, engines...)
	}
	return out
}

// WriteFiles writes the generated files into the run directory.
func (p *Plan) WriteFiles() (endpointsPath string, err error) {
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return "", fmt.Errorf("run directory: %w", err)
	}
	b, err := p.EndpointsYAML()
	if err != nil {
		return "", err
	}
	endpointsPath = filepath.Join(p.Dir, "endpoints.yaml")
	if err := os.WriteFile(endpointsPath, b, 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", endpointsPath, err)
	}
	return endpointsPath, nil
}
