// Package eppharness starts an Endpoint Picker as a real process, stock GIE v1.5.0's or
// pdgate's, over the same endpoints, and reports its addresses, CPU time and resident memory,
// for the EPP benchmarks (pdgate-bench epp, the memory figures).
//
// Both kinds run in Kubernetes mode against a local kube-apiserver + etcd (the envtest
// binaries) holding an InferencePool and Ready pods with loopback IPs: the only way stock GIE
// discovers pods, and the same code path for pdgate. pdgate's standalone endpoints-file mode is
// available with Options.Standalone.
package eppharness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Kind chooses the EPP binary.
type Kind string

const (
	// KindStockGIE is GIE v1.5.0's cmd/epp, built from the module into <BinDir>/gie-epp if missing.
	KindStockGIE Kind = "gie"
	// KindPdgate is pdgate's EPP, <BinDir>/epp (built from ./cmd/epp if missing).
	KindPdgate Kind = "pdgate"
	// KindFloor is the ext_proc protocol's floor, `<BinDir>/pdgate-bench floor-epp` (built from
	// ./cmd/pdgate-bench if missing): the EPP's exchange answered without a decision, every
	// request to the first endpoint. It needs no control plane and no config.
	KindFloor Kind = "floor"
)

// Endpoint is one model-server pod.
type Endpoint struct {
	// Name is the pod name (a DNS-1123 subdomain).
	Name string
	// Address is the pod IP (a loopback address, see LoopbackAddresses).
	Address string
	// Port is the model server's port; in Kubernetes mode every endpoint has the same one.
	Port        int
	Labels      map[string]string
	Annotations map[string]string
}

// Options configure one EPP.
type Options struct {
	Kind Kind
	// ConfigFile is the EndpointPickerConfig; "" = the binary's default config.
	ConfigFile string
	Endpoints  []Endpoint
	// BinDir holds the binaries; "" = <repo>/bin.
	BinDir string
	// WorkDir receives generated files and, without Log, the EPP's log; "" = a temp dir.
	WorkDir string
	// ExtraArgs are appended to the EPP's flags.
	ExtraArgs []string
	// Log receives the EPP's stdout and stderr; nil = <WorkDir>/<pool>.log.
	Log io.Writer

	// Cluster is the control plane to use; nil = Start starts one and Stop stops it.
	Cluster *Cluster
	// PoolName names the InferencePool; "" = "epp-<kind>".
	PoolName string
	// Standalone runs pdgate's EPP from an endpoints file instead of the API server.
	Standalone bool
	// TLS serves ext_proc with a self-signed certificate (as both EPPs do by default);
	// false serves plaintext, which is what the benchmarks use for both kinds.
	TLS bool
	// ReadyTimeout bounds the wait for the EPP to serve every endpoint; 0 = 2 minutes.
	ReadyTimeout time.Duration
	// Callgrind runs the EPP under valgrind's callgrind so that EPP.Instructions counts what it
	// executes (callgrind.go).
	Callgrind bool
	// OTLPEndpoint, when set (host:port of a plaintext OTLP gRPC trace receiver, see
	// StartOTLPReceiver), turns pdgate's tracing on with every request sampled; "" runs with
	// --tracing=false. Stock GIE and the floor take no OTLP endpoint.
	OTLPEndpoint string
	// OTLPSampleRatio is the fraction of requests sampled with OTLPEndpoint (0 or 1: all).
	OTLPSampleRatio float64
}

// EPP is a started EPP process.
type EPP struct {
	Kind        Kind
	GRPCAddr    string // ext_proc, 127.0.0.1:port
	HealthAddr  string // gRPC health, 127.0.0.1:port
	MetricsAddr string // Prometheus /metrics (plain HTTP), 127.0.0.1:port
	PID         int
	// Namespace and PoolName locate the InferencePool (Kubernetes mode).
	Namespace, PoolName string
	// Args are the flags the binary was started with.
	Args []string

	cmd      *exec.Cmd
	done     chan struct{}
	waitErr  error
	tail     *tailBuffer
	instr    *instructionMeter
	logFile  *os.File
	cluster  *Cluster
	owned    bool
	pool     *pool
	tmp      string
	stopOnce sync.Once
	stopErr  error
}

// Validate checks the options without side effects.
func (o *Options) Validate() error {
	switch o.Kind {
	case KindStockGIE, KindPdgate, KindFloor:
	default:
		return fmt.Errorf("eppharness: kind %q: want %q, %q or %q", o.Kind, KindStockGIE, KindPdgate, KindFloor)
	}
	if o.Standalone && o.Kind != KindPdgate {
		return fmt.Errorf("eppharness: standalone mode needs kind %q (stock GIE discovers pods only through a kube-apiserver)", KindPdgate)
	}
	if o.OTLPEndpoint != "" && o.Kind != KindPdgate {
		return fmt.Errorf("eppharness: OTLPEndpoint needs kind %q (the bench traces pdgate's EPP only)", KindPdgate)
	}
	if len(o.Endpoints) == 0 {
		return errors.New("eppharness: no endpoints")
	}
	seen := map[string]bool{}
	for i, ep := range o.Endpoints {
		if errs := validation.IsDNS1123Subdomain(ep.Name); len(errs) > 0 {
			return fmt.Errorf("eppharness: endpoints[%d].name %q: %s", i, ep.Name, errs[0])
		}
		if seen[ep.Name] {
			return fmt.Errorf("eppharness: endpoints[%d].name %q listed twice", i, ep.Name)
		}
		seen[ep.Name] = true
		if errs := validation.IsValidIP(nil, ep.Address); len(errs) > 0 {
			return fmt.Errorf("eppharness: endpoints[%d].address %q: not an IP", i, ep.Address)
		}
		if ep.Port < 1 || ep.Port > 65535 {
			return fmt.Errorf("eppharness: endpoints[%d].port %d: want 1..65535", i, ep.Port)
		}
	}
	if !o.Standalone {
		if _, err := commonTargetPort(o.Endpoints); err != nil {
			return fmt.Errorf("eppharness: %w", err)
		}
	}
	if o.ReadyTimeout < 0 {
		return fmt.Errorf("eppharness: ReadyTimeout %s: want >= 0", o.ReadyTimeout)
	}
	return nil
}

// Start starts the EPP and returns once it serves every endpoint (gRPC health SERVING and
// one per-pod series per endpoint in its /metrics).
func Start(ctx context.Context, o Options) (*EPP, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 2 * time.Minute
	}
	if o.PoolName == "" {
		o.PoolName = "epp-" + string(o.Kind)
	}
	e := &EPP{Kind: o.Kind, PoolName: o.PoolName, done: make(chan struct{}), tail: &tailBuffer{max: 16 << 10}}
	ok := false
	defer func() {
		if !ok {
			_ = e.Stop()
		}
	}()
	if o.WorkDir == "" {
		dir, err := os.MkdirTemp("", "pdgate-epp-")
		if err != nil {
			return nil, err
		}
		o.WorkDir, e.tmp = dir, dir
	}
	bin, err := binary(o.Kind, o.BinDir)
	if err != nil {
		return nil, err
	}
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	e.GRPCAddr, e.HealthAddr, e.MetricsAddr = loop(ports[0]), loop(ports[1]), loop(ports[2])
	var env []string
	switch {
	case o.Kind == KindFloor:
		var eps []string
		for _, ep := range o.Endpoints {
			eps = append(eps, net.JoinHostPort(ep.Address, strconv.Itoa(ep.Port)))
		}
		e.Args = []string{"floor-epp", "--grpc-port", strconv.Itoa(ports[0]), "--grpc-health-port", strconv.Itoa(ports[1]),
			"--metrics-port", strconv.Itoa(ports[2]), "--endpoints", strings.Join(eps, ",")}
	case o.Standalone:
		file := filepath.Join(o.WorkDir, o.PoolName+"-endpoints.yaml")
		if err := writeEndpointsFile(file, o.Endpoints); err != nil {
			return nil, err
		}
		e.Args = append([]string{"--endpoints-file", file, "--pool-name", o.PoolName}, commonArgs(o, ports)...)
	default:
		if e.cluster = o.Cluster; e.cluster == nil {
			if e.cluster, err = StartCluster(ClusterOptions{WorkDir: o.WorkDir}); err != nil {
				return nil, err
			}
			e.owned = true
		}
		p, err := e.cluster.createPool(ctx, o.PoolName, ports[0], o.Endpoints)
		e.pool, e.Namespace = &p, p.Namespace
		if err != nil {
			return nil, err
		}
		e.Args = append([]string{"--pool-name", o.PoolName, "--pool-namespace", p.Namespace}, commonArgs(o, ports)...)
		env = []string{"KUBECONFIG=" + e.cluster.Kubeconfig, "NAMESPACE=" + p.Namespace, "POD_NAME=" + o.PoolName + "-epp-0-0"}
	}
	if o.OTLPEndpoint != "" {
		env = append(env, otlpEnv(o.OTLPEndpoint, o.OTLPSampleRatio)...)
	}
	e.Args = append(e.Args, o.ExtraArgs...)
	out := o.Log
	if out == nil {
		if e.logFile, err = os.Create(filepath.Join(o.WorkDir, o.PoolName+".log")); err != nil {
			return nil, err
		}
		out = e.logFile
	}
	name, args := bin, e.Args
	if o.Callgrind {
		name, args = callgrindArgs(bin, e.Args, o.WorkDir)
		env = append(env, callgrindEnv...)
	}
	e.cmd = exec.Command(name, args...)
	e.cmd.Env = append(os.Environ(), env...)
	w := io.MultiWriter(out, e.tail)
	e.cmd.Stdout, e.cmd.Stderr = w, w
	// The EPP dies with the harness even if the harness is killed before Stop.
	e.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	e.PID = e.cmd.Process.Pid
	if o.Callgrind {
		e.instr = &instructionMeter{pid: e.PID, dir: o.WorkDir}
	}
	go func() { e.waitErr = e.cmd.Wait(); close(e.done) }()
	rctx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
	defer cancel()
	if err := e.waitReady(rctx, len(o.Endpoints)); err != nil {
		return nil, fmt.Errorf("%s EPP (%s %v) not ready: %w\n--- log tail ---\n%s", o.Kind, bin, e.Args, err, e.tail.String())
	}
	ok = true
	return e, nil
}

func loop(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// commonArgs are the flags both binaries share. Plaintext ext_proc and an unauthenticated
// metrics endpoint let the bench talk to the EPP without credentials; tracing is off unless the
// options name a receiver. Everything else is the binary's default.
func commonArgs(o Options, ports []int) []string {
	args := []string{
		"--grpc-port", strconv.Itoa(ports[0]), "--grpc-health-port", strconv.Itoa(ports[1]),
		"--metrics-port", strconv.Itoa(ports[2]), "--secure-serving=" + strconv.FormatBool(o.TLS),
		"--metrics-endpoint-auth=false", "--tracing=" + strconv.FormatBool(o.OTLPEndpoint != ""),
	}
	if o.ConfigFile != "" {
		args = append(args, "--config-file", o.ConfigFile)
	}
	return args
}

// endpointsDoc is pdgate's endpoints file (cmd/epp/endpoints).
type endpointsDoc struct {
	Endpoints []endpointEntry `yaml:"endpoints"`
}

type endpointEntry struct {
	Name        string            `yaml:"name"`
	Address     string            `yaml:"address"`
	Port        int               `yaml:"port"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

func writeEndpointsFile(path string, eps []Endpoint) error {
	doc := endpointsDoc{}
	for _, ep := range eps {
		doc.Endpoints = append(doc.Endpoints, endpointEntry(ep))
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return fmt.Errorf("endpoints file: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("writing endpoints file: %w", err)
	}
	return nil
}

// CPUTime is the process's user+system CPU time so far (10 ms resolution, see userHZ).
func (e *EPP) CPUTime() (time.Duration, error) { return procCPUTime(e.PID) }

// RSS is the process's resident memory now (VmRSS), in bytes.
func (e *EPP) RSS() (int64, error) {
	m, err := ProcMemory(e.PID)
	return m.RSS, err
}

// Memory returns VmRSS and VmHWM (peak) in bytes.
func (e *EPP) Memory() (Memory, error) { return ProcMemory(e.PID) }

// Exited is closed when the process has exited.
func (e *EPP) Exited() <-chan struct{} { return e.done }

// LogTail returns the last 16 KB of the EPP's output.
func (e *EPP) LogTail() string { return e.tail.String() }

// Stop terminates the EPP (SIGTERM, then SIGKILL after 15 s), removes its pool and pods, and
// stops the control plane if Start started it. It is safe to call more than once.
func (e *EPP) Stop() error {
	e.stopOnce.Do(func() {
		var errs []error
		if e.cmd != nil && e.cmd.Process != nil {
			_ = e.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-e.done:
			case <-time.After(15 * time.Second):
				_ = e.cmd.Process.Kill()
				<-e.done
				errs = append(errs, fmt.Errorf("%s EPP pid %d ignored SIGTERM for 15s and was killed", e.Kind, e.PID))
			}
		}
		if e.logFile != nil {
			_ = e.logFile.Close()
		}
		e.instr.removeDumps()
		if e.cluster != nil {
			if e.pool != nil && !e.owned {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				errs = append(errs, e.cluster.deletePool(ctx, *e.pool))
				cancel()
			}
			if e.owned {
				errs = append(errs, e.cluster.Stop())
			}
		}
		if e.tmp != "" {
			_ = os.RemoveAll(e.tmp)
		}
		e.stopErr = errors.Join(errs...)
	})
	return e.stopErr
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if i := bytes.IndexByte(t.buf, '\n'); i >= 0 && len(t.buf) == t.max {
		return string(t.buf[i+1:])
	}
	return string(t.buf)
}
