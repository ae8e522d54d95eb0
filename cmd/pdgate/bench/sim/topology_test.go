package simbench

import (
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

func TestPlacement(t *testing.T) {
	if p, err := ParsePlacement(""); p != nil || err != nil {
		t.Fatalf("empty: %v %v", p, err)
	}
	for _, bad := range []string{"2", "0x4", "ax4", "2x"} {
		if _, err := ParsePlacement(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	p, err := ParsePlacement("2x4")
	if err != nil {
		t.Fatal(err)
	}
	pods := FleetPD(64, "m")
	p.Apply(pods)
	topo := func(i int) podmodel.Topology { return podmodel.TopologyOf(pods[i].Labels, podmodel.TopologyLabels{}) }
	// Pods 0-3 share a host (both roles), pod 4 starts the next host in the next rack, the
	// fifth host (pods 16-19) is in rack 4, the second zone.
	if podmodel.CompareTopology(topo(0), topo(3)) != podmodel.LevelHost || pods[0].Role == pods[1].Role {
		t.Fatalf("host 0: %+v %+v", topo(0), topo(3))
	}
	if podmodel.CompareTopology(topo(0), topo(4)) != podmodel.LevelZone {
		t.Fatalf("pods 0 and 4: %v", podmodel.CompareTopology(topo(0), topo(4)))
	}
	if podmodel.CompareTopology(topo(0), topo(16)) != podmodel.LevelRegion {
		t.Fatalf("pods 0 and 16: %v", podmodel.CompareTopology(topo(0), topo(16)))
	}
	if podmodel.CompareTopology(topo(0), topo(32)) != podmodel.LevelRack {
		t.Fatalf("pods 0 and 32 (host 8, rack 0): %v", podmodel.CompareTopology(topo(0), topo(32)))
	}
	racks := map[string]bool{}
	for i := range pods {
		racks[topo(i).Rack] = true
	}
	if len(racks) != 8 {
		t.Fatalf("%d racks, want 8", len(racks))
	}
}

func TestTransferTimeScalesWithDistance(t *testing.T) {
	prof := costmodel.Default()
	p, _ := ParsePlacement("2x4")
	pods := FleetPD(64, "m")
	p.Apply(pods)
	s := &Sim{prof: prof, cfg: Config{Placement: p}, res: newResult(len(pods))}
	mk := func(i int) *pod { return &pod{spec: pods[i]} }
	base := prof.KVTransferTime(4096)
	for _, tt := range []struct {
		a, b int
		mult float64
	}{{0, 1, 0.25}, {0, 32, 1}, {0, 4, 2}, {0, 16, 4}} {
		if got, want := s.transferTime(mk(tt.a), mk(tt.b), 4096), time.Duration(float64(base)*tt.mult); got != want {
			t.Errorf("pods %d→%d: %v, want %v", tt.a, tt.b, got, want)
		}
	}
	if s.res.transfers != [5]int{1, 1, 1, 1, 0} {
		t.Fatalf("transfer counts %v", s.res.transfers)
	}
}

func TestParseTransferCost(t *testing.T) {
	cases := []struct {
		in      string
		want    [5]float64
		wantErr bool
	}{
		{in: "", want: DefaultTransferCost},
		{in: "0.25,1,3,16", want: [5]float64{0.25, 1, 3, 16, 16}},
		{in: " 1, 1, 1, 1", want: [5]float64{1, 1, 1, 1, 1}},
		{in: "1,2,3", wantErr: true},
		{in: "1,2,3,4,5", wantErr: true},
		{in: "0,1,2,4", wantErr: true},
		{in: "1,x,2,4", wantErr: true},
		{in: "1,2,1,4", wantErr: true}, // a farther hop cheaper than a nearer one
	}
	for _, tc := range cases {
		got, err := ParseTransferCost(tc.in)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("%q: %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

// The topology comparison is paired: with one seed, topology-blind and topology-aware pairing
// (config/bench/topology, a picker instance per profile) make the same prefill picks, so the
// two runs differ only where the decode pick differs; and the aware one moves transfers closer.
func TestTopologyComparisonIsPaired(t *testing.T) {
	rows := randomAzureRows(5, 600, 4*time.Millisecond, 300, 100)
	once := func(config string) *Result {
		cfg := placedConfig(t, rows, "2x4", FleetPD(32, "m"))
		cfg.EPPConfig = repoFile(config)
		return run(t, cfg)
	}
	blind, aware := once("config/bench/topology/pd-prefill-first.yaml"), once("config/bench/topology/pd-topology.yaml")
	prefillLegs := func(r *Result) []int {
		var out []int
		for _, p := range r.perPod {
			out = append(out, p.prefill)
		}
		return out
	}
	if a, b := prefillLegs(blind), prefillLegs(aware); !slices.Equal(a, b) {
		t.Fatalf("prefill legs per pod differ: blind %v, aware %v", a, b)
	}
	near := func(r *Result) int { return r.transfers[podmodel.LevelHost] + r.transfers[podmodel.LevelRack] }
	if near(aware) <= near(blind) {
		t.Fatalf("host/rack-local transfers: aware %d, blind %d; want more with topology-aware pairing (all: %v vs %v)",
			near(aware), near(blind), aware.transfers, blind.transfers)
	}
}

// randomAzureRows are n trace rows step apart, each with a seeded random prompt of minPrompt to
// minPrompt+2999 tokens and 1 to maxOutput output tokens.
func randomAzureRows(seed int64, n int, step time.Duration, minPrompt, maxOutput int) []workload.AzureRow {
	rng := rand.New(rand.NewSource(seed))
	rows := make([]workload.AzureRow, n)
	for i := range rows {
		rows[i] = workload.AzureRow{Offset: time.Duration(i) * step,
			ContextTokens: minPrompt + rng.Intn(3000), GeneratedTokens: 1 + rng.Intn(maxOutput)}
	}
	return rows
}

// placedConfig replays every row at 250 req/s (seed 1) on pods laid out over topology ("" =
// no placement), with the default cost profile and GIE's default config.
func placedConfig(t *testing.T, rows []workload.AzureRow, topology string, pods []PodSpec) Config {
	t.Helper()
	src, err := NewAzureSource(rows, 250, 1, len(rows), 0)
	if err != nil {
		t.Fatal(err)
	}
	placement, err := ParsePlacement(topology)
	if err != nil {
		t.Fatal(err)
	}
	placement.Apply(pods)
	return Config{Profile: costmodel.Default(), Pods: pods, Model: "m", Source: src, Placement: placement, Seed: 1}
}
