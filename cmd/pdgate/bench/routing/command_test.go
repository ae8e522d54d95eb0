package routing

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
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
