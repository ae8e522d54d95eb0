package routing

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/internal/validatetest"
	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
)

func TestValidateNamesTheFlag(t *testing.T) {
	validatetest.Options(t, DefaultOptions, []validatetest.Case[Options]{
		{Name: "defaults", Change: func(*Options) {}},
		{Name: "quick policies", Change: func(o *Options) { o.Policies = QuickPolicies }},
		{Name: "too few requests", Change: func(o *Options) { o.Requests = 1 }, Want: "--requests"},
		{Name: "negative offset", Change: func(o *Options) { o.TraceOffset = -1 }, Want: "--trace-offset"},
		{Name: "no phase", Change: func(o *Options) { o.Loads, o.MixedLoad = nil, 0 }, Want: "--loads"},
		{Name: "load out of range", Change: func(o *Options) { o.Loads = []float64{0.5, 4} }, Want: "--loads/--mixed-load"},
		{Name: "mix without requests", Change: func(o *Options) { o.MixedRequests = 0 }, Want: "--mixed-requests"},
		{Name: "time scale", Change: func(o *Options) { o.TimeScale = 0 }, Want: "--time-scale"},
		{Name: "gap", Change: func(o *Options) { o.Gap = -time.Second }, Want: "--phase-gap"},
		{Name: "slo", Change: func(o *Options) { o.SLO.TPOT = 0 }, Want: "--slo-tpot"},
		{Name: "unknown policy", Change: func(o *Options) { o.Policies = []string{"recommended", "fastest"} }, Want: `unknown policy "fastest"`},
		{Name: "mooncake phase", Change: func(o *Options) { o.Mooncake = "t.jsonl" }},
		{Name: "mooncake slice too short", Change: func(o *Options) { o.Mooncake, o.MooncakeRequests = "t.jsonl", 1 }, Want: "--mooncake-requests"},
		{Name: "mooncake negative offset", Change: func(o *Options) { o.Mooncake, o.MooncakeOffset = "t.jsonl", -3 }, Want: "--mooncake-offset"},
		{Name: "mooncake load", Change: func(o *Options) { o.Mooncake, o.MooncakeLoad = "t.jsonl", 0 }, Want: "--mooncake-load"},
		{Name: "mooncake every", Change: func(o *Options) { o.Mooncake, o.MooncakeEvery = "t.jsonl", 0 }, Want: "--mooncake-every"},
	})
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
