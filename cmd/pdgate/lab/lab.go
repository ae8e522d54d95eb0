package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab/otlpreceiver"
	"github.com/pdgate/pdgate/cmd/pdgate/loadgen"
)

// Options configures `pdgate lab`.
type Options struct {
	// Topology is the topology file.
	Topology string
	// BinDir holds the binaries (bin/ after `make build`).
	BinDir string
	// Dir is the run directory (generated files and logs); default
	// $TMPDIR/pdgate-lab-<subnet>.
	Dir string
	// Subnet is "127.x.y": the pods get 127.x.y.10 upward.
	Subnet string
	// Port is the gateway's port on 127.0.0.1 (0 picks a free one).
	Port int
	// ReadyTimeout bounds the wait until every process is healthy.
	ReadyTimeout time.Duration
	// StatusEvery refreshes the live status table (interactive mode; 0 disables).
	StatusEvery time.Duration
	// Kubernetes runs the EPP in Kubernetes mode against a local kube-apiserver and etcd
	// (KubeAssets: the envtest binaries), with the InferencePool (GIE's CRDs from CRDDir)
	// and the pods created through the API.
	Kubernetes         bool
	KubeAssets, CRDDir string
	// Prometheus, when set, is the prometheus binary (a name on PATH or a path): the lab
	// starts a real Prometheus scraping every process (prometheus.go) at PrometheusURL.
	Prometheus string
	// OTLP starts an OTLP/gRPC trace receiver in the lab's process and points the EPPs,
	// sidecars and gateways at it; received spans go to SpansPath, one JSON object a line
	// (otlp.go).
	OTLP bool
	// Out receives the human output (URL, curl, status table); Err receives diagnostics.
	Out, Err io.Writer
}

// DefaultTopology is the topology `make run` uses, relative to the repository root.
const DefaultTopology = "config/lab/default.yaml"

// Lab is a running lab.
type Lab struct {
	Plan  *Plan
	URL   string
	sup   *Supervisor
	procs []ProcSpec
	kube  *kubeLab
	// endpoints is the standalone EPP's endpoints file ("" in Kubernetes mode).
	endpoints string
	routers   int // routers started by StartRouter
	// RouterMetrics is the metrics address (host:port, /metrics) of each EPP that
	// StartRouter started, in order: a test reads a replica's own state there.
	RouterMetrics []string
	// Kubeconfig is the local API server's admin kubeconfig (Kubernetes mode).
	Kubeconfig string
	// PrometheusURL is the lab's Prometheus ("" when Options.Prometheus is unset).
	PrometheusURL string
	eppTargets    []string
	// OTLPEndpoint is the lab's OTLP receiver and SpansPath its span file ("" without
	// Options.OTLP).
	OTLPEndpoint, SpansPath string
	otlp                    *otlpreceiver.Receiver
	spans                   *spanSink
	otlpEnv                 []string
}

// RunDir returns the default run directory for a subnet.
func RunDir(subnet string) string {
	if subnet == "" {
		subnet = "127.0.10"
	}
	return filepath.Join(os.TempDir(), "pdgate-lab-"+subnet)
}

// Start lays the topology out, starts every process and waits until all are healthy and a
// request has gone through the gateway. On failure everything started is stopped.
func Start(ctx context.Context, o Options) (*Lab, error) {
	if o.Topology == "" {
		o.Topology = DefaultTopology
	}
	if o.BinDir == "" {
		o.BinDir = "bin"
	}
	if o.Dir == "" {
		o.Dir = RunDir(o.Subnet)
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 90 * time.Second
	}
	t, err := LoadTopology(o.Topology)
	if err != nil {
		return nil, err
	}
	plan, err := NewPlan(t, PlanOptions{Subnet: o.Subnet, GatewayPort: o.Port, Dir: o.Dir, BinDir: o.BinDir, Kubernetes: o.Kubernetes})
	if err != nil {
		return nil, err
	}
	if err := plan.CheckPorts(); err != nil {
		return nil, err
	}
	if o.Kubernetes {
		if o.KubeAssets == "" {
			o.KubeAssets = DefaultKubeAssets()
		}
		if o.CRDDir == "" {
			o.CRDDir = DefaultCRDDir()
		}
		if err := checkKubeFiles(o.KubeAssets, o.CRDDir); err != nil {
			return nil, err
		}
	}
	if err := os.RemoveAll(o.Dir); err != nil {
		return nil, fmt.Errorf("cleaning the run directory: %w", err)
	}
	// Kubernetes mode has no endpoints file: the EPP reads the pool and pods from the API.
	endpoints := ""
	if o.Kubernetes {
		err = os.MkdirAll(o.Dir, 0o755)
	} else {
		endpoints, err = plan.WriteFiles()
	}
	if err != nil {
		return nil, err
	}
	l := &Lab{Plan: plan, URL: "http://" + plan.GatewayAddr, sup: NewSupervisor(o.Dir), procs: plan.Procs(endpoints), endpoints: endpoints}
	if o.Kubernetes {
		if l.kube, err = startKube(ctx, plan, o.KubeAssets, o.CRDDir); err != nil {
			return nil, err
		}
		l.Kubeconfig, l.procs = l.kube.kubeconfig, plan.kubeProcs(l.kube.kubeconfig)
	}
	if o.Prometheus != "" {
		if err := l.addPrometheus(o.Prometheus); err != nil {
			l.Stop()
			return nil, err
		}
	}
	if o.OTLP {
		if err := l.startOTLP(); err != nil {
			l.Stop()
			return nil, err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, o.ReadyTimeout)
	defer cancel()
	for i, spec := range l.procs {
		if l.kube != nil && spec.Name == "epp" {
			// The pods' processes (everything before the EPP) are up: report them Ready
			// through the API before the EPP starts watching, as kubelets would.
			if err := l.sup.WaitHealthy(rctx, l.procs[:i]); err != nil {
				l.Stop()
				return nil, fmt.Errorf("lab not healthy (logs in %s): %w", o.Dir, err)
			}
			if err := l.kube.createPods(rctx, plan); err != nil {
				l.Stop()
				return nil, err
			}
		}
		if err := l.sup.Start(spec); err != nil {
			l.Stop()
			return nil, err
		}
	}
	if err := l.sup.WaitHealthy(rctx, l.procs); err != nil {
		l.Stop()
		return nil, fmt.Errorf("lab not healthy (logs in %s): %w", o.Dir, err)
	}
	if err := l.writeSampleRequest(); err != nil {
		l.Stop()
		return nil, err
	}
	if err := l.warmUp(rctx, l.URL); err != nil {
		l.Stop()
		return nil, fmt.Errorf("lab not serving (logs in %s): %w", o.Dir, err)
	}
	return l, nil
}

// StartRouter starts one more EPP and gateway over the same pods, with the same
// EndpointPickerConfig and no state shared with the lab's own (standalone mode): what a second
// gateway or EPP replica sees. It returns the new gateway's URL once a request has gone
// through it; Stop stops it with the rest of the lab.
func (l *Lab) StartRouter(ctx context.Context) (string, error) {
	if l.kube != nil {
		return "", errors.New("lab: a second router needs the standalone lab (not --kubernetes)")
	}
	ports, err := freePorts(5)
	if err != nil {
		return "", err
	}
	r := router{grpcPort: ports[0], healthPort: ports[1], metricsPort: ports[2],
		gatewayAdminAddr: "127.0.0.1:" + strconv.Itoa(ports[3]), gatewayAddr: "127.0.0.1:" + strconv.Itoa(ports[4])}
	l.routers++
	procs := l.Plan.routerProcs(l.endpoints, r, "-"+strconv.Itoa(l.routers+1))
	l.traced(procs)
	for _, spec := range procs {
		if err := l.sup.Start(spec); err != nil {
			return "", err
		}
	}
	l.procs = append(l.procs, procs...)
	l.RouterMetrics = append(l.RouterMetrics, "127.0.0.1:"+strconv.Itoa(r.metricsPort))
	if err := l.addEPPScrapeTarget("127.0.0.1:" + strconv.Itoa(r.metricsPort)); err != nil {
		return "", err
	}
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := l.sup.WaitHealthy(rctx, procs); err != nil {
		return "", fmt.Errorf("second router not healthy (logs in %s): %w", l.Plan.Dir, err)
	}
	url := "http://" + r.gatewayAddr
	if err := l.warmUp(rctx, url); err != nil {
		return "", fmt.Errorf("second router not serving (logs in %s): %w", l.Plan.Dir, err)
	}
	return url, nil
}

// warmUp sends one small completion through the gateway until it succeeds: the EPP only
// schedules once it has scraped its endpoints. In Kubernetes mode it then sends one under each
// InferenceObjective: a sheddable objective's request is refused while the EPP's saturation
// detector sees endpoints it has not scraped yet (saturated, by GIE's rule), and a lab is ready
// when every class of its traffic is served.
func (l *Lab) warmUp(ctx context.Context, url string) error {
	objectives := []string{""}
	if l.kube != nil {
		for _, o := range l.Plan.Topology.Objectives {
			objectives = append(objectives, o.Name)
		}
	}
	for _, objective := range objectives {
		if err := l.warmUpAs(ctx, url, objective); err != nil {
			return err
		}
	}
	return nil
}

// warmUpAs is warmUp for one objective ("" = none).
func (l *Lab) warmUpAs(ctx context.Context, url, objective string) error {
	body, _ := json.Marshal(map[string]any{"model": l.Plan.Topology.Model, "prompt": "warm up", "max_tokens": 1})
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/completions", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if objective != "" {
			req.Header.Set(objectiveHeader, objective)
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
		} else {
			last = err.Error()
		}
		for _, spec := range l.procs {
			if !l.sup.Running(spec.Name) {
				return errors.New(l.sup.Describe(spec.Name))
			}
		}
		select {
		case <-ctx.Done():
			if objective != "" {
				return fmt.Errorf("no successful request through the gateway under objective %q (last: %s)", objective, last)
			}
			return fmt.Errorf("no successful request through the gateway (last: %s)", last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Stop stops every process and waits for them, then the local control plane and the OTLP
// receiver. A span file that could not be written is reported on stderr: Stop has no caller
// to return it to on the paths that stop a failed start.
func (l *Lab) Stop() {
	l.sup.Stop(10 * time.Second)
	l.kube.stop()
	if err := l.stopOTLP(); err != nil {
		fmt.Fprintf(os.Stderr, "pdgate lab: spans: %v\n", err)
	}
}

// Pids are the lab's process-group leaders.
func (l *Lab) Pids() []int { return l.sup.Pids() }

// Crashed delivers the name of a process that ended while the lab runs.
func (l *Lab) Crashed() <-chan string { return l.sup.Exited() }

// Describe explains how a process ended.
func (l *Lab) Describe(name string) string { return l.sup.Describe(name) }

// SampleRequestPath is where the lab writes the sample request body the printed curl sends:
// a ~450-token prompt, above the P/D threshold, so the request is disaggregated unless the
// EPP picks the combined pod.
func (l *Lab) SampleRequestPath() string { return filepath.Join(l.Plan.Dir, "sample-request.json") }

func (l *Lab) writeSampleRequest() error {
	b, _ := json.Marshal(map[string]any{
		"model": l.Plan.Topology.Model, "max_tokens": 24, "stream": true,
		"prompt": strings.Repeat("Explain disaggregated serving. ", 60),
	})
	if err := os.WriteFile(l.SampleRequestPath(), b, 0o644); err != nil {
		return fmt.Errorf("writing the sample request: %w", err)
	}
	return nil
}

// SampleCurl is the command the lab prints for a first request.
func (l *Lab) SampleCurl() string {
	return fmt.Sprintf("curl -sN %s/v1/completions -H 'content-type: application/json' -H 'x-pdgate-trace: 1' -D - -d @%s",
		l.URL, l.SampleRequestPath())
}

// Interactive prints the URL, a sample curl and a live status table until ctx ends or a
// process crashes.
func (l *Lab) Interactive(ctx context.Context, o Options) error {
	out := o.Out
	t := l.Plan.Topology
	fmt.Fprintf(out, "pdgate lab %q is up (%d pods; logs and generated files in %s)\n", t.Name, len(l.Plan.Pods), l.Plan.Dir)
	if t.Description != "" {
		fmt.Fprintln(out, "  "+t.Description)
	}
	if l.Kubeconfig != "" {
		fmt.Fprintf(out, "\nKubernetes mode: the EPP watches InferencePool %s/%s and its pods on a local API server:\n  kubectl --kubeconfig %s get inferencepools,pods -o wide\n",
			Namespace, PoolName, l.Kubeconfig)
	}
	fmt.Fprintf(out, "\nGateway: %s  (OpenAI API; the dev gateway stands in for Envoy)\n\nTry:\n  %s\n\n", l.URL, l.SampleCurl())
	if l.PrometheusURL != "" {
		fmt.Fprintf(out, "Prometheus: %s  (scrapes every EPP, sidecar and simulator each second; config/dashboards/pdgate.json's queries run there)\n\n", l.PrometheusURL)
	}
	if l.OTLPEndpoint != "" {
		fmt.Fprintf(out, "Traces: OTLP gRPC receiver at %s (the EPP, sidecars and gateway export every request's spans);\n  each span is a JSON line in %s\n\n", l.OTLPEndpoint, l.SpansPath)
	}
	fmt.Fprintln(out, "The x-pdgate-decision response header names the decode, prefill and encode pods the EPP picked")
	fmt.Fprintln(out, "and why; `pdgate lab traces` shows the full traces. Ctrl-C stops everything.")
	fmt.Fprintln(out)
	RenderStatus(out, l.Plan.Status(ctx))
	every := o.StatusEvery
	var tick <-chan time.Time
	if every > 0 {
		tk := time.NewTicker(every)
		defer tk.Stop()
		tick = tk.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case name := <-l.Crashed():
			return errors.New(l.Describe(name))
		case <-tick:
			fmt.Fprintf(out, "\n%s\n", time.Now().Format("15:04:05"))
			RenderStatus(out, l.Plan.Status(ctx))
		}
	}
}

// Classify turns an x-pdgate-decision header into a decision type and per-pod legs. The
// header is "profile=pod[,pod];...;stage-skipped=reason"; a profile's stage is read from its
// name (prefill, encode, otherwise decode) and each pod's role tells combined pods apart.
func (p *Plan) Classify(decision string) (string, []loadgen.Leg) {
	var legs []loadgen.Leg
	var prefill, encode, combined bool
	for _, part := range strings.Split(decision, ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || strings.HasSuffix(k, "-skipped") || strings.HasSuffix(k, "-reason") {
			continue
		}
		stage := "decode"
		switch {
		case strings.Contains(k, "prefill"):
			stage = "prefill"
		case strings.Contains(k, "encode"):
			stage = "encode"
		}
		for _, name := range strings.Split(v, ",") {
			pod := p.PodByName(strings.TrimSpace(name))
			if pod == nil {
				continue
			}
			// A pod's role wins over the profile name when they disagree (a config may
			// name its profiles freely).
			switch pod.Role {
			case RolePrefill:
				stage = "prefill"
			case RoleEncode:
				stage = "encode"
			}
			legs = append(legs, loadgen.Leg{Pod: pod.Name, Stage: stage})
			switch {
			case stage == "prefill":
				prefill = true
			case stage == "encode":
				encode = true
			case pod.Role == RoleCombined:
				combined = true
			}
		}
	}
	switch {
	case encode && prefill:
		return "encode-prefill-decode", legs
	case prefill:
		return "prefill-decode", legs
	case encode:
		return "encode-decode", legs
	case combined:
		return "combined", legs
	case len(legs) > 0:
		return "decode-only", legs
	}
	return "unknown", legs
}
