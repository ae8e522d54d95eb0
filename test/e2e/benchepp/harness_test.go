// Package benchepp checks the EPP benchmark's process harness and the `pdgate bench epp`
// command end to end: real EPP processes (stock GIE v1.5.0 and pdgate) against a real
// kube-apiserver + etcd, fake model servers on loopback addresses, real ext_proc gRPC.
package benchepp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/eppharness"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

// needAssets skips (or fails under CI) without the envtest control plane.
func needAssets(t *testing.T) {
	t.Helper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	if assets == "" {
		assets = filepath.Join(repoRoot(), "bin", "envtest")
	}
	if _, err := os.Stat(filepath.Join(assets, "kube-apiserver")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("CI is set but there is no kube-apiserver in %s", assets)
		}
		t.Skipf("no kube-apiserver in %s (run hack/build-envtest.sh)", assets)
	}
}

// TestHarnessBothKinds starts stock GIE and pdgate's EPP over the same 8 endpoints through one
// control plane and checks each holds every endpoint, scrapes it, and reports CPU and memory.
func TestHarnessBothKinds(t *testing.T) {
	needAssets(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	hosts, err := eppharness.LoopbackAddresses(8)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := eppharness.StartModelServers(hosts, 0, eppharness.EngineMetrics{})
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	cluster, err := eppharness.StartCluster(eppharness.ClusterOptions{WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cluster.Stop() }()
	for _, tc := range []struct {
		kind   eppharness.Kind
		config string
		role   func(i int) string
	}{
		{kind: eppharness.KindStockGIE},
		{kind: eppharness.KindPdgate, config: "config/llmd/pd.yaml", role: func(i int) string { return []string{"prefill", "decode"}[i%2] }},
	} {
		t.Run(string(tc.kind), func(t *testing.T) {
			var eps []eppharness.Endpoint
			for i, h := range hosts {
				ep := eppharness.Endpoint{Name: fmt.Sprintf("pod-%d", i), Address: h, Port: ms.Port}
				if tc.role != nil {
					ep.Labels = map[string]string{"llm-d.ai/role": tc.role(i)}
				}
				eps = append(eps, ep)
			}
			cfg := ""
			if tc.config != "" {
				cfg = filepath.Join(repoRoot(), tc.config)
			}
			base := ms.Snapshot()
			epp, err := eppharness.Start(ctx, eppharness.Options{Kind: tc.kind, ConfigFile: cfg, Endpoints: eps,
				Cluster: cluster, BinDir: binDir, WorkDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := epp.Stop(); err != nil {
					t.Error(err)
				}
			}()
			if err := ms.WaitScraped(ctx, base, 2); err != nil {
				t.Fatalf("%v\n%s", err, epp.LogTail())
			}
			cpu, err := epp.CPUTime()
			if err != nil || cpu <= 0 {
				t.Fatalf("CPU time %v, %v", cpu, err)
			}
			mem, err := epp.Memory()
			if err != nil || mem.RSS < 1<<20 || mem.HWM < mem.RSS {
				t.Fatalf("memory %+v, %v", mem, err)
			}
			t.Logf("%s: pid %d, grpc %s, CPU %v, RSS %d MiB (peak %d MiB)", tc.kind, epp.PID, epp.GRPCAddr, cpu, mem.RSS>>20, mem.HWM>>20)
		})
	}
}
