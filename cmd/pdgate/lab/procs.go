package lab

import (
	"fmt"
	"path/filepath"
	"strconv"
)

// ProcSpec is one process the lab starts.
type ProcSpec struct {
	Name   string
	Binary string
	Args   []string
	// Env is added to the lab's environment.
	Env []string
	// Health is an HTTP URL answering 2xx once the process is ready ("" = none).
	Health string
}

// sidecarConnector maps the simulator's vLLM connector name to the sidecar's.
var sidecarConnector = map[string]string{"nixl": "nixlv2", "shared-storage": "shared-storage"}

// Procs returns every process of the lab, in start order: simulators, sidecars, the EPP,
// the gateway.
func (p *Plan) Procs(endpointsPath string) []ProcSpec {
	t := p.Topology
	bin := func(n string) string { return filepath.Join(p.BinDir, n) }
	shared := filepath.Join(p.Dir, "shared-storage")
	var out []ProcSpec
	for i, pod := range p.Pods {
		args := []string{
			"--host", pod.IP, "--port", strconv.Itoa(pod.enginePort),
			"--dialect", pod.Engine, "--role", pod.Role, "--kv-connector", pod.Spec.KVConnector,
			"--model", t.Model, "--seed", strconv.Itoa(i + 1),
			"--time-scale", strconv.FormatFloat(t.TimeScale, 'g', -1, 64),
			"--shared-storage-dir", shared,
		}
		if prof := pod.Spec.Profile; prof != "" {
			args = append(args, "--profile", t.Path(prof))
		} else if t.SimProfile != "" {
			args = append(args, "--profile", t.Path(t.SimProfile))
		}
		if pod.BootstrapPort != 0 {
			args = append(args, "--bootstrap-port", strconv.Itoa(pod.BootstrapPort))
		}
		health := "http://" + pod.EngineAddr() + "/health"
		if pod.DataParallel() {
			// Ranks start in order: the last rank answering means every rank is up.
			args = append(args, "--data-parallel-size", strconv.Itoa(pod.dpSize))
			health = "http://" + pod.RankEngineAddr(pod.dpSize-1) + "/health"
		}
		args = append(args, pod.Spec.SimArgs...)
		out = append(out, ProcSpec{Name: "sim-" + pod.Name, Binary: bin("sim"), Args: args, Health: health})
	}
	trtMachine := 0
	for _, pod := range p.Pods {
		if !pod.HasSidecar() {
			continue
		}
		args := []string{
			"--listen", pod.Endpoint(), "--engine-url", "http://" + pod.EngineAddr(),
			"--engine", pod.Engine, "--allowlist", p.targets(),
		}
		if c, ok := sidecarConnector[pod.Spec.KVConnector]; ok && pod.Engine == EngineVLLM {
			args = append(args, "--kv-connector", c)
		}
		if pod.DataParallel() {
			args = append(args, "--data-parallel-size", strconv.Itoa(pod.dpSize))
		}
		if pod.Engine == EngineTRTLLM {
			// Request ids are Snowflakes (ms, machine, counter): sidecars sharing context
			// workers need distinct machine ids, or two of them starting requests in the
			// same millisecond hand one worker the same id (409/410 from the engine).
			args = append(args, "--trt-schedule-style", pod.Spec.TRTScheduleStyle, "--trt-machine-id", strconv.Itoa(trtMachine%1024))
			trtMachine++
		}
		if pod.Engine == EngineSGLang {
			args = append(args, "--sglang-bootstrap-port", strconv.Itoa(BootstrapPort))
		}
		args = append(args, t.SidecarArgs...)
		out = append(out, ProcSpec{Name: "sidecar-" + pod.Name, Binary: bin("sidecar"), Args: args,
			Health: "http://" + pod.Endpoint() + "/sidecar/healthz"})
	}
	return append(out, p.routerProcs(endpointsPath, p.ownRouter(), "")...)
}

// router is one EPP and its gateway: the lab's own, and any StartRouter adds.
type router struct {
	grpcPort, healthPort, metricsPort int
	gatewayAddr, gatewayAdminAddr     string
}

func (p *Plan) ownRouter() router {
	return router{grpcPort: p.EPPGRPCPort, healthPort: p.EPPHealthPort, metricsPort: p.EPPMetricsPort,
		gatewayAddr: p.GatewayAddr, gatewayAdminAddr: p.GatewayAdminAddr}
}

// routerProcs are one router's EPP and gateway; suffix tells a second router's processes
// apart ("" for the lab's own: "epp", "gateway").
func (p *Plan) routerProcs(endpointsPath string, r router, suffix string) []ProcSpec {
	t := p.Topology
	eppArgs := []string{
		"--endpoints-file", endpointsPath, "--config-file", t.Path(t.EPPConfig),
		"--grpc-port", strconv.Itoa(r.grpcPort), "--grpc-health-port", strconv.Itoa(r.healthPort),
		"--metrics-port", strconv.Itoa(r.metricsPort), "--secure-serving=" + strconv.FormatBool(p.EPPTLS),
		"--allow-decision-trace=true",
		// Sidecars report the end of each prefill leg here, so the ledger's prefill charge
		// ends with the leg (not with the response headers). Only the lab's own EPP hears
		// them: the sidecars name one address.
		"--prefill-release-address=" + p.PrefillReleaseAddress(),
	}
	eppArgs = append(eppArgs, t.EPPArgs...)
	return []ProcSpec{
		{Name: "epp" + suffix, Binary: filepath.Join(p.BinDir, "epp"), Args: eppArgs},
		{Name: "gateway" + suffix, Binary: filepath.Join(p.BinDir, "gateway"), Args: []string{
			"--listen", r.gatewayAddr, "--admin-listen", r.gatewayAdminAddr,
			"--epp", "127.0.0.1:" + strconv.Itoa(r.grpcPort),
			"--epp-tls=" + strconv.FormatBool(p.EPPTLS), "--epp-insecure-skip-verify",
		}, Health: "http://" + r.gatewayAdminAddr + "/readyz"},
	}
}

// String renders a command line for logs and --dry-run.
func (s ProcSpec) String() string {
	out := s.Binary
	for _, a := range s.Args {
		out += " " + strconv.Quote(a)
	}
	return fmt.Sprintf("%s: %s", s.Name, out)
}

// PrefillReleaseAddress is where the lab's sidecars reach the EPP's prefill-release callback:
// the EPP's metrics server on loopback.
func (p *Plan) PrefillReleaseAddress() string {
	return "127.0.0.1:" + strconv.Itoa(p.EPPMetricsPort)
}
