package ha

import (
	"context"
	"fmt"
	"os"
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
	*testsupport.Proc
	name        string
	healthPort  int
	metricsPort int
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
	p := &eppProcess{name: name, healthPort: testsupport.FreePort(t), metricsPort: testsupport.FreePort(t)}
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
	p.Proc = testsupport.StartProc(t, suite.Bin("epp"), append(append([]string{}, spec.env...), "KUBECONFIG="+kubeconfig, "NAMESPACE="+namespace, "POD_NAME="+name), args...)
	t.Cleanup(func() { p.stop(10 * time.Second) })
	return p
}

// stop sends SIGTERM (a rolling update's goodbye: the leader gives up its lease) and waits;
// it kills the process if it outlives the grace period.
func (p *eppProcess) stop(grace time.Duration) { p.Stop(syscall.SIGTERM, grace) }

func (p *eppProcess) exited() bool {
	select {
	case <-p.Exited():
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
