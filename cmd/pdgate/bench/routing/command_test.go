package routing

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
)

func TestValidateNamesTheFlag(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Options)
		want   string // "" = valid
	}{
		{"defaults", func(*Options) {}, ""},
		{"quick policies", func(o *Options) { o.Policies = QuickPolicies }, ""},
		{"too few requests", func(o *Options) { o.Requests = 1 }, "--requests"},
		{"negative offset", func(o *Options) { o.TraceOffset = -1 }, "--trace-offset"},
		{"no phase", func(o *Options) { o.Loads, o.MixedLoad = nil, 0 }, "--loads"},
		{"load out of range", func(o *Options) { o.Loads = []float64{0.5, 4} }, "--loads/--mixed-load"},
		{"mix without requests", func(o *Options) { o.MixedRequests = 0 }, "--mixed-requests"},
		{"time scale", func(o *Options) { o.TimeScale = 0 }, "--time-scale"},
		{"gap", func(o *Options) { o.Gap = -time.Second }, "--phase-gap"},
		{"slo", func(o *Options) { o.SLO.TPOT = 0 }, "--slo-tpot"},
		{"unknown policy", func(o *Options) { o.Policies = []string{"recommended", "fastest"} }, `unknown policy "fastest"`},
		{"mooncake phase", func(o *Options) { o.Mooncake = "t.jsonl" }, ""},
		{"mooncake slice too short", func(o *Options) { o.Mooncake, o.MooncakeRequests = "t.jsonl", 1 }, "--mooncake-requests"},
		{"mooncake negative offset", func(o *Options) { o.Mooncake, o.MooncakeOffset = "t.jsonl", -3 }, "--mooncake-offset"},
		{"mooncake load", func(o *Options) { o.Mooncake, o.MooncakeLoad = "t.jsonl", 0 }, "--mooncake-load"},
		{"mooncake every", func(o *Options) { o.Mooncake, o.MooncakeEvery = "t.jsonl", 0 }, "--mooncake-every"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := DefaultOptions
			tt.change(&o)
			err := o.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("valid options refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
}

func TestSelectPoliciesKeepsReportOrder(t *testing.T) {
	got, err := SelectPolicies([]string{PolicyCombined, PolicyLeastRequest, PolicyRecommended})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
	}
	if strings.Join(names, ",") != "least-request,recommended,combined-only" {
		t.Fatalf("order %v", names)
	}
	all, _ := SelectPolicies(nil)
	if len(all) != len(Policies) || all[len(all)-1].Fleet != FleetCombined {
		t.Fatalf("all policies: %v", all)
	}
}

// Every policy's config and both fleets' topologies load, and the fleets have as many GPUs.
func TestShippedFilesLoad(t *testing.T) {
	o := DefaultOptions
	o.ConfigDir = "../../../../config/bench/routing"
	o.AzureConv = "../../../../" + DefaultOptions.AzureConv
	for _, p := range Policies {
		t.Run(p.Name, func(t *testing.T) {
			o.Out = t.TempDir()
			path, err := writeTopology(o, p)
			if err != nil {
				t.Fatal(err)
			}
			topo, err := lab.LoadTopology(path)
			if err != nil || topo.TimeScale != o.TimeScale || !strings.HasSuffix(topo.EPPConfig, strings.TrimPrefix(p.Config, "../../")) {
				t.Fatalf("written topology: %v %+v", err, topo)
			}
		})
	}
}

// Prepare on the real trace: capacities are positive and consistent, phases carry the
// requested loads and rates.
func TestPrepareOnTheTrace(t *testing.T) {
	o := DefaultOptions
	o.ConfigDir = "../../../../config/bench/routing"
	o.AzureConv = "../../../../" + DefaultOptions.AzureConv
	if _, err := os.Stat(o.AzureConv); err != nil {
		t.Skipf("trace not available: %v", err)
	}
	o.Requests, o.MixedRequests = 60, 30
	res, phases, err := Prepare(o)
	if err != nil {
		t.Fatal(err)
	}
	c := res.AzureCapacity
	if c.PDRPS <= 0 || c.PDRPS != min(2*c.PrefillPodRPS, 2*c.DecodePodRPS) || res.MixedCapacity.PDRPS <= 0 {
		t.Fatalf("capacities %+v %+v", c, res.MixedCapacity)
	}
	if len(phases) != 4 || phases[0].Workload != WorkloadMixed || len(phases[0].Requests) != 30 || len(phases[3].Requests) != 60 {
		t.Fatalf("phases %d", len(phases))
	}
	for i, l := range o.Loads {
		if p := phases[i+1]; p.Load != l || p.RateRPS != l*c.PDRPS {
			t.Errorf("phase %s: load %v rate %v", p.Name, p.Load, p.RateRPS)
		}
	}
	if res.FleetGPUs[FleetPD] != 4 || res.FleetGPUs[FleetCombined] != 4 {
		t.Fatalf("GPUs %v", res.FleetGPUs)
	}
}

// With --mooncake, Prepare adds the trace slice's phase at its own capacity.
func TestPrepareWithMooncake(t *testing.T) {
	o := DefaultOptions
	o.ConfigDir = "../../../../config/bench/routing"
	o.AzureConv = "../../../../" + DefaultOptions.AzureConv
	o.Mooncake = "../../../../" + workload.DefaultMooncakePath
	for _, f := range []string{o.AzureConv, o.Mooncake} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("trace not available: %v", err)
		}
	}
	o.Requests, o.MixedLoad, o.Loads = 20, 0, []float64{0.8}
	o.MooncakeOffset, o.MooncakeRequests, o.MooncakeLoad = 100, 40, 0.5
	res, phases, err := Prepare(o)
	if err != nil {
		t.Fatal(err)
	}
	mc := res.MooncakeCapacity
	if len(phases) != 2 || res.MooncakeSlice != [2]int{100, 140} || !(mc.PDRPS > 0) || !(mc.PDRPS < res.AzureCapacity.PDRPS) {
		t.Fatalf("phases %d, slice %v, capacity %+v vs azure %+v", len(phases), res.MooncakeSlice, mc, res.AzureCapacity)
	}
	p := phases[1]
	if p.Name != "mooncake@50%" || len(p.Requests) != 40 || p.RateRPS != 0.5*mc.PDRPS {
		t.Fatalf("mooncake phase %s: %d requests at %v req/s", p.Name, len(p.Requests), p.RateRPS)
	}
	// every 20th conversation: the slice keeps follow-up turns of its own conversations
	follow := 0
	for _, r := range p.Requests {
		if strings.HasSuffix(r.Kind, "/"+workload.KindMooncakeFollowUp) {
			follow++
		}
	}
	if follow < 5 {
		t.Fatalf("%d follow-up turns in the slice of every 20th conversation", follow)
	}
	o.MooncakeOffset = 12_000
	if _, _, err := Prepare(o); err == nil || !strings.Contains(err.Error(), "--mooncake-offset/--mooncake-requests") {
		t.Fatalf("a slice past the trace: %v", err)
	}
}
