package simbench

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Fleet kinds: every policy runs on the same number of simulated GPUs.
const (
	FleetKindPD       = "pd"       // rolesets of one prefill and one decode pod
	FleetKindCombined = "combined" // every pod serves whole requests
)

// Policy is one routing policy under test: an EndpointPickerConfig and the fleet it routes.
type Policy struct {
	Name   string
	Config string // relative to the repository root; "" = GIE's default config
	Fleet  string
	// Annotations are added to every pod (mirrored into labels as the EPP does).
	Annotations map[string]string
	About       string
}

// combinedLeastRequest is AIBrix's least-request strategy for whole requests, set as the pods'
// profile (as config/bench/routing/combined.yaml does): AIBrix's precedence puts the profile
// above the plugin default.
const combinedLeastRequest = `{"defaultProfile":"default","profiles":{"default":{"routingStrategy":"least-request","routingConfig":{"combined":true}}}}`

// The policies both the scale runs (Policies) and the goodput sweep (GoodputPolicies) compare,
// defined once so both read the same config and fleet; each list describes them in its own
// report's words.
var (
	leastRequestCombined = Policy{Name: "least-request-combined", Config: "config/bench/routing/combined-least-request.yaml",
		Fleet: FleetKindCombined, Annotations: map[string]string{podmodel.AnnotationConfig: combinedLeastRequest}}
	leastRequest = Policy{Name: "least-request", Config: "config/bench/routing/least-request.yaml", Fleet: FleetKindPD}
	llmdPD       = Policy{Name: "llm-d-pd", Config: "config/llmd/pd.yaml", Fleet: FleetKindPD}
	recommended  = Policy{Name: "recommended", Config: "config/recommended.yaml", Fleet: FleetKindPD}
)

func (p Policy) describedAs(about string) Policy {
	p.About = about
	return p
}

// Policies are the built-in policies, in report order. The first is the baseline of the
// EPP CPU ratios: stock GIE (its default config) on the combined fleet.
var Policies = []Policy{
	{Name: "gie-default-combined", Config: "", Fleet: FleetKindCombined,
		About: "stock GIE v1.5.0 default config (queue, KV-cache and prefix scorers) on the combined-only fleet; the EPP CPU baseline"},
	leastRequestCombined.describedAs("combined-only fleet, AIBrix least-request (same GPU count as the P/D fleet)"),
	leastRequest.describedAs("AIBrix pd strategy, least_request prefill and decode scoring"),
	llmdPD.describedAs("llm-d's P/D config: prefix-based decider, queue + prefix-cache scorers"),
	{Name: "aibrix-token-load", Config: "config/aibrix/token-load.yaml", Fleet: FleetKindPD,
		About: "AIBrix pd strategy, hybrid_cache_load prefill + token_load decode (ledger), rate cap"},
	recommended.describedAs("pdgate's recommended config (token_load prefill by work in flight, token_load decode with a per-request cost, prefix-based decider, fast parser)"),
}

// TopologyPolicies compare topology-blind and topology-aware P/D pairing; they run
// only when named, with --topology laying the fleet out over zones and racks.
var TopologyPolicies = []Policy{
	{Name: "pd-prefill-first", Config: "config/bench/topology/pd-prefill-first.yaml", Fleet: FleetKindPD,
		About: "llm-d P/D with stageOrder prefill-first, topology-blind pairing"},
	{Name: "pd-topology", Config: "config/bench/topology/pd-topology.yaml", Fleet: FleetKindPD,
		About: "llm-d P/D with stageOrder prefill-first, decode picked near the prefill pod (topology-affinity-filter preferred + load allowance, topology-affinity-scorer)"},
}

// SelectPolicies picks policies by name ("all" or a comma-separated list). An entry
// NAME=FILE is a policy of the user's own: the EndpointPickerConfig FILE (relative to the
// repository root, or absolute) on the P/D fleet, reported as NAME.
func SelectPolicies(list string) ([]Policy, error) {
	if list == "" || list == "all" {
		return Policies, nil
	}
	var out []Policy
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if name, file, ok := strings.Cut(n, "="); ok {
			name, file = strings.TrimSpace(name), strings.TrimSpace(file)
			if name == "" || file == "" {
				return nil, fmt.Errorf("--policies: %q: want NAME=FILE (an EndpointPickerConfig for the P/D fleet)", n)
			}
			out = append(out, Policy{Name: name, Config: file, Fleet: FleetKindPD, About: "EndpointPickerConfig " + file})
			continue
		}
		found := false
		for _, p := range append(append([]Policy(nil), Policies...), TopologyPolicies...) {
			if p.Name == n {
				out, found = append(out, p), true
			}
		}
		if !found {
			var names []string
			for _, p := range append(append([]Policy(nil), Policies...), TopologyPolicies...) {
				names = append(names, p.Name)
			}
			return nil, fmt.Errorf("--policies: unknown policy %q (known: %s)", n, strings.Join(names, ", "))
		}
	}
	return out, nil
}

func (p Policy) fleet(n int, model string) []PodSpec {
	var pods []PodSpec
	if p.Fleet == FleetKindCombined {
		pods = FleetCombined(n, model)
	} else {
		pods = FleetPD(n, model)
	}
	p.annotate(pods)
	return pods
}

// shapedFleet is fleet with the P/D pods split by shape ("pd-P:D", ParseShape); "" and
// combined fleets lay out as fleet does.
func (p Policy) shapedFleet(n int, shape, model string) ([]PodSpec, error) {
	if shape == "" || p.Fleet == FleetKindCombined {
		return p.fleet(n, model), nil
	}
	sh, err := ParseShape(shape)
	if err != nil {
		return nil, fmt.Errorf("--shape: %w", err)
	}
	pods, err := sh.Layout(n, model)
	if err != nil {
		return nil, fmt.Errorf("--shape %s: %w", shape, err)
	}
	p.annotate(pods)
	return pods, nil
}

// annotate gives every pod the policy's annotations as labels.
func (p Policy) annotate(pods []PodSpec) {
	for i := range pods {
		for k, v := range p.Annotations {
			pods[i].Labels[protocol.AnnotationLabelPrefix+k] = v
		}
	}
}

func (p Policy) configPath(root string) string {
	if p.Config == "" || filepath.IsAbs(p.Config) {
		return p.Config
	}
	return filepath.Join(root, p.Config)
}
