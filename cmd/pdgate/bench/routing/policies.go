package routing

import (
	"fmt"
	"strings"
)

// Fleets: the P/D fleet (pd.yaml) and the combined-only fleet with as many GPUs (combined.yaml).
const (
	FleetPD       = "pd"
	FleetCombined = "combined"
)

// Policy is one EndpointPickerConfig on one fleet.
type Policy struct {
	Name string `json:"name"`
	// Config is the EndpointPickerConfig, relative to the bench's config directory.
	Config string `json:"config"`
	Fleet  string `json:"fleet"`
	Note   string `json:"note"`
}

// Policies are every policy the bench compares, in report order.
var Policies = []Policy{
	{"random", "random.yaml", FleetPD, "GIE random-picker on both stages, always disaggregated"},
	{"round-robin", "round-robin.yaml", FleetPD, "stand-in (no round-robin picker in GIE v1.5.0 or pdgate): GIE running-requests-size-scorer, scraped every 50 ms, always disaggregated"},
	{"least-request", "least-request.yaml", FleetPD, "AIBrix pd, least_request prefill and decode (aibrix-pd-pair)"},
	{"llmd-pd", "../../llmd/pd.yaml", FleetPD, "llm-d's P/D sample: prefix-based decider, queue + prefix-cache scorers"},
	{"aibrix-prefix-cache", "../../aibrix-pd.yaml", FleetPD, "AIBrix pd default: prefix_cache prefill, load_balancing decode"},
	{"token-load", "token-load.yaml", FleetPD, "AIBrix pd, token_load prefill and decode (pd-token-ledger)"},
	{"hybrid-cache-load", "hybrid-cache-load.yaml", FleetPD, "AIBrix pd, hybrid_cache_load prefill, load_balancing decode"},
	{"recommended", "../../recommended.yaml", FleetPD, "pdgate recommended (config/recommended.yaml): AIBrix pairing with token_load prefill (work in flight) and token_load decode (tokens + a per-request cost), asking llm-d's prefix-based decider per request"},
	{"combined-only", "combined-least-request.yaml", FleetCombined, "4 combined pods, AIBrix least-request"},
}

// Names of the policies the goals compare.
const (
	PolicyLeastRequest = "least-request"
	PolicyRecommended  = "recommended"
	PolicyCombined     = "combined-only"
)

// QuickPolicies are the policies `--quick` runs: the goals' three.
var QuickPolicies = []string{PolicyLeastRequest, PolicyRecommended, PolicyCombined}

// SelectPolicies resolves names (empty: all) in report order.
func SelectPolicies(names []string) ([]Policy, error) {
	if len(names) == 0 {
		return Policies, nil
	}
	want := map[string]bool{}
	for _, n := range names {
		found := false
		for _, p := range Policies {
			if p.Name == n {
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("--policies: unknown policy %q (known: %s)", n, strings.Join(policyNames(), ", "))
		}
		want[n] = true
	}
	var out []Policy
	for _, p := range Policies {
		if want[p.Name] {
			out = append(out, p)
		}
	}
	return out, nil
}

func policyNames() []string {
	out := make([]string, len(Policies))
	for i, p := range Policies {
		out[i] = p.Name
	}
	return out
}
