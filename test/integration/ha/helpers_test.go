package ha

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pdgate/pdgate/test/testsupport"
)

// eppProcess is one running EPP.
type eppProcess struct {
	name        string
	cmd         *exec.Cmd
	healthPort  int
	metricsPort int
	logPath     string
	done        chan error
}

// eppSpec is what the chart's EPP Deployment runs: args, literal env values, config files.
type eppSpec struct {
	args    []string
	env     []string
	configs map[string]string
}

// startEPP runs the EPP binary with the chart's args and env, its config files written to a
// temporary directory and its ports replaced by free loopback ports.
func startEPP(t *testing.T, name, namespace, kubeconfig string, spec eppSpec) *eppProcess {
	t.Helper()
	dir := t.TempDir()
	chartArgs := spec.args
	for k, v := range spec.configs {
		if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := &eppProcess{name: name, healthPort: testsupport.FreePort(t), metricsPort: testsupport.FreePort(t), logPath: filepath.Join(dir, name+".log"), done: make(chan error, 1)}
	replace := map[string]string{
		"--grpc-port":        strconv.Itoa(testsupport.FreePort(t)),
		"--grpc-health-port": strconv.Itoa(p.healthPort),
		"--metrics-port":     strconv.Itoa(p.metricsPort),
	}
	var args []string
	for i := 0; i < len(chartArgs); i++ {
		a := chartArgs[i]
		if v, ok := replace[a]; ok && i+1 < len(chartArgs) {
			args = append(args, a, v)
			i++
			continue
		}
		if a == "--config-file" && i+1 < len(chartArgs) {
			args = append(args, a, filepath.Join(dir, strings.TrimPrefix(chartArgs[i+1], "/config/")))
			i++
			continue
		}
		args = append(args, a)
	}
	logf, err := os.Create(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(suite.Bin("epp"), args...)
	p.cmd.Env = append(append(os.Environ(), spec.env...), "KUBECONFIG="+kubeconfig, "NAMESPACE="+namespace, "POD_NAME="+name)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { p.done <- p.cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		p.stop(10 * time.Second)
		if t.Failed() {
			data, _ := os.ReadFile(p.logPath)
			t.Logf("--- %s log (last 4000 bytes) ---\n%s", name, tail(data, 4000))
		}
	})
	return p
}

// stop sends SIGTERM and waits; it kills the process if it outlives the grace period.
func (p *eppProcess) stop(grace time.Duration) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *eppProcess) exited() bool {
	select {
	case err := <-p.done:
		p.done <- err
		return true
	default:
		return false
	}
}

// health asks the EPP's gRPC health server about a service.
func (p *eppProcess) health(ctx context.Context, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	conn, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", p.healthPort), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return 0, err
	}
	return resp.GetStatus(), nil
}

func (p *eppProcess) ready(ctx context.Context, service string) bool {
	s, err := p.health(ctx, service)
	return err == nil && s == healthpb.HealthCheckResponse_SERVING
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
