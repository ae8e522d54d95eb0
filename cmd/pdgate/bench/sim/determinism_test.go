package simbench

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestSameSeedSameRun: a run is a function of its Config and Seed. Two runs of the same policy
// over the same seeded workload give the same per-request latencies (in completion order, so
// the order is compared too), the same per-pod routing and the same failures; a GIE default
// picker policy and P/D policies (AIBrix pairing, pdgate's recommended config with its token
// ledger, topology-aware pairing over a placement) and two routers over GIE's prefix scorer
// (whose producer writes its index asynchronously) are each run twice.
func TestSameSeedSameRun(t *testing.T) {
	rows := randomAzureRows(3, 400, 5*time.Millisecond, 100, 200)
	for _, tc := range []struct {
		name, config, topology string
		routers                int
		pods                   func() []PodSpec
	}{
		{name: "gie-default combined", pods: func() []PodSpec { return FleetCombined(16, "m") }},
		{name: "least-request", config: "config/bench/routing/least-request.yaml", pods: func() []PodSpec { return FleetPD(16, "m") }},
		{name: "recommended", config: "config/recommended.yaml", pods: func() []PodSpec { return FleetPD(16, "m") }},
		{name: "llm-d-pd", config: "config/llmd/pd.yaml", pods: func() []PodSpec { return FleetPD(16, "m") }},
		{name: "aibrix-token-load", config: "config/aibrix/token-load.yaml", pods: func() []PodSpec { return FleetPD(16, "m") }},
		{name: "prefix-approx 2 routers", config: "config/bench/prefix/approx.yaml", routers: 2,
			pods: func() []PodSpec { return FleetCombined(16, "m") }},
		{name: "pd-topology 2x4", config: "config/bench/topology/pd-topology.yaml", topology: "2x4",
			pods: func() []PodSpec { return FleetPD(16, "m") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			once := func() string {
				cfg := placedConfig(t, rows, tc.topology, tc.pods())
				cfg.Routers = tc.routers
				if tc.config != "" {
					cfg.EPPConfig = repoFile(tc.config)
				}
				return fingerprint(run(t, cfg))
			}
			if a, b := once(), once(); a != b {
				t.Fatalf("two runs with seed 1 differ:\n%s\n---\n%s", a, b)
			}
		})
	}
}

// fingerprint is everything a run measured, per request and per pod.
func fingerprint(r *Result) string {
	failed := make([]string, 0, len(r.failed))
	for k, n := range r.failed {
		failed = append(failed, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(failed)
	return fmt.Sprintf("ttft %v\ntpot %v\ne2e %v\npods %v\nlegs %v\ntransfers %v\nprefix %d/%d\nfailed %v",
		r.ttft, r.tpot, r.e2e, r.perPod, r.legs, r.transfers, r.cachedTokens, r.promptTokens, failed)
}
