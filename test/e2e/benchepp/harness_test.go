// Package benchepp checks the EPP benchmark's process harness and the `pdgate-bench epp`
// command end to end: real EPP processes (stock GIE v1.5.0 and pdgate) against a real
// kube-apiserver + etcd, fake model servers on loopback addresses, real ext_proc gRPC.
package benchepp

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

// TestHarnessBothKinds starts stock GIE and pdgate's EPP over the same 8 endpoints through one
// control plane and checks each holds every endpoint, scrapes it, and reports CPU and memory.
func TestHarnessBothKinds(t *testing.T) {
	kubetest.NeedAssets(t)
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
				cfg = filepath.Join(root, tc.config)
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

// TestBenchEPPQuick runs `pdgate-bench epp --quick` on one small size with the baseline, the
// protocol's floor (pdgate-bench floor-epp, every request to one pod) and one pdgate config and
// checks the report: every request routed, CPU measured, the burst
// counted over the 8 primary pods, files written. The EPP's CPU is read from /proc in 10 ms
// ticks, so the phase sends enough requests (~0.25 ms each at 1 KB) to span several: with 60,
// a phase could measure 0 ticks.
func TestBenchEPPQuick(t *testing.T) {
	const quickRequests = 400
	kubetest.NeedAssets(t)
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "pdgate-bench"), "epp", "--quick", "--sizes", "1k",
		"--requests", strconv.Itoa(quickRequests), "--burst", "40", "--configs", "gie-default,floor,llmd-pd", "--out", out, "--bin-dir", binDir)
	cmd.Dir = root
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pdgate-bench epp: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(filepath.Join(out, "epp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Data struct {
			Configs []struct {
				Name  string `json:"name"`
				Sizes []struct {
					Load struct {
						Requests int   `json:"requests"`
						OK       int   `json:"ok"`
						CPU      int64 `json:"eppCpuNs"`
					} `json:"load"`
				} `json:"sizes"`
				Burst struct {
					Requests int            `json:"requests"`
					Dest     map[string]int `json:"destinations"`
				} `json:"burst"`
				PrimaryPods []string `json:"primaryPods"`
				Memory      struct {
					RSS int64 `json:"RSS"`
				} `json:"memoryAfterRun"`
				Error string `json:"error"`
			} `json:"configs"`
			Goals []struct {
				Goal string `json:"goal"`
			} `json:"goals"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Data.Configs) != 3 {
		t.Fatalf("configs: %+v", rep.Data.Configs)
	}
	for _, c := range rep.Data.Configs {
		if c.Error != "" || len(c.Sizes) != 1 || c.Sizes[0].Load.Requests != quickRequests || c.Sizes[0].Load.OK != quickRequests || c.Sizes[0].Load.CPU <= 0 {
			t.Fatalf("%s: %+v", c.Name, c)
		}
		inPrimary := 0
		for _, p := range c.PrimaryPods {
			inPrimary += c.Burst.Dest[p]
		}
		if len(c.PrimaryPods) != 8 || c.Burst.Requests != 40 || inPrimary != 40 || c.Memory.RSS <= 0 {
			t.Fatalf("%s: burst %+v over %v, RSS %d", c.Name, c.Burst, c.PrimaryPods, c.Memory.RSS)
		}
	}
	if len(rep.Data.Goals) != 1 { // 1 KB throughput for llmd-pd (no 220 KB, no recommended config, none for the floor)
		t.Fatalf("goals %+v", rep.Data.Goals)
	}
	for _, f := range []string{"epp.md", "epp-throughput.png", "epp-cpu.png"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Fatal(err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, "epp.md"))
	if !strings.Contains(string(md), "net CPU × floor") {
		t.Fatalf("epp.md has no multiple of the floor:\n%s", md)
	}
}
