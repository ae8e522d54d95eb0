package simbench

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/plugins/lib/tokenestimate"
)

// The lab's chat requests carry the seeded arrivals: their arrival times, and bodies whose
// estimate by the EPP gives the arrival's tokens (what the engines hash into blocks), its
// output length and streaming.
func TestChatRequests(t *testing.T) {
	reqs, keys, err := chatRequests(smallPrefix, "m", 5, 7, 30)
	if err != nil {
		t.Fatal(err)
	}
	keyOf := map[string]uint64{} // system prompt -> key: one key per prefix, distinct prefixes apart
	src, _ := NewSharedPrefixSource(smallPrefix, "m", 5, 7, 30)
	if len(reqs) != 30 {
		t.Fatalf("got %d requests, want 30", len(reqs))
	}
	for i, r := range reqs {
		a, _ := src.Next()
		var body struct {
			Model     string `json:"model"`
			MaxTokens int    `json:"max_tokens"`
			Stream    bool   `json:"stream"`
		}
		if err := json.Unmarshal(r.Body, &body); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		var chat fwksched.ChatCompletionsRequest
		if err := json.Unmarshal(r.Body, &chat); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		system := a.Body.ChatCompletions.Messages[0].Content.Raw
		if k, seen := keyOf[system]; seen && k != keys[i] {
			t.Fatalf("request %d: one prefix, two keys", i)
		}
		keyOf[system] = keys[i]
		if r.At != a.At || r.At <= 0 {
			t.Fatalf("request %d is sent at %v, arrives at %v", i, r.At, a.At)
		}
		if body.Model != "m" || body.MaxTokens != a.Output || !body.Stream || !r.Stream || r.Path != "/v1/chat/completions" {
			t.Fatalf("request %d: model %q max_tokens %d (want %d) stream %v/%v path %s", i, body.Model, body.MaxTokens, a.Output,
				body.Stream, r.Stream, r.Path)
		}
		est := tokenestimate.Estimate(&fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{ChatCompletions: &chat}}, tokenestimate.EstimateParams{})
		if !slices.Equal(est.TokenIDs, a.Tokens) {
			t.Fatalf("request %d: the EPP's estimate of the lab body differs from the arrival's tokens", i)
		}
	}
	distinct := map[uint64]bool{}
	for _, k := range keyOf {
		distinct[k] = true
	}
	if len(distinct) != len(keyOf) || len(keyOf) < 2 {
		t.Fatalf("%d prefixes, %d keys", len(keyOf), len(distinct))
	}
}

func TestSplitDirect(t *testing.T) {
	reqs := make([]workload.Request, 10)
	for i := range reqs {
		reqs[i].Kind = fmt.Sprint(i)
	}
	kinds := func(rs []workload.Request) []string {
		out := []string{}
		for _, r := range rs {
			out = append(out, r.Kind)
		}
		return out
	}
	keys := []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}
	tests := []struct {
		name         string
		route        string
		direct, pods int
		routed       []string
		perPod       [][]string
	}{
		{"none", DirectPrefix, 0, 2, kinds(reqs), [][]string{{}, {}}},
		{"half over two pods in turn", DirectRoundRobin, 2, 2, []string{"0", "2", "4", "6", "8"}, [][]string{{"1", "5", "9"}, {"3", "7"}}},
		{"a third over four pods in turn", DirectRoundRobin, 3, 4, []string{"0", "1", "3", "4", "6", "7", "9"}, [][]string{{"2"}, {"5"}, {"8"}, {}}},
		{"all in turn", DirectRoundRobin, 1, 3, []string{}, [][]string{{"0", "3", "6", "9"}, {"1", "4", "7"}, {"2", "5", "8"}}},
		{"half by prefix key", DirectPrefix, 2, 2, []string{"0", "2", "4", "6", "8"}, [][]string{{}, {"1", "3", "5", "7", "9"}}},
		{"a third by prefix key over four pods", DirectPrefix, 3, 4, []string{"0", "1", "3", "4", "6", "7", "9"}, [][]string{{"8"}, {"5"}, {"2"}, {}}},
		{"half to a second router", DirectRouter, 2, 1, []string{"0", "2", "4", "6", "8"}, [][]string{{"1", "3", "5", "7", "9"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			routed, perPod := splitDirect(reqs, keys, tt.route, tt.direct, tt.pods)
			got := [][]string{}
			for _, p := range perPod {
				got = append(got, kinds(p))
			}
			if !slices.Equal(kinds(routed), tt.routed) || !reflect.DeepEqual(got, tt.perPod) {
				t.Fatalf("routed %v, per pod %v; want %v, %v", kinds(routed), got, tt.routed, tt.perPod)
			}
		})
	}
}

// The two lab topologies load, plan, and differ only in the EndpointPickerConfig (and name).
func TestPrefixLabTopologies(t *testing.T) {
	var topos []*lab.Topology
	for _, x := range PrefixLabTopologies {
		topo, err := lab.LoadTopology(filepath.Join("../../../..", x.Topology))
		if err != nil {
			t.Fatal(err)
		}
		plan, err := lab.NewPlan(topo, lab.PlanOptions{Subnet: "127.0.78", Dir: t.TempDir(), BinDir: "bin"})
		if err != nil {
			t.Fatalf("%s: %v", x.Topology, err)
		}
		if _, err := plan.EndpointsYAML(); err != nil {
			t.Fatalf("%s: %v", x.Topology, err)
		}
		if len(plan.Pods) != prefixLabPods {
			t.Fatalf("%s: %d pods, the lab's rate assumes %d", x.Topology, len(plan.Pods), prefixLabPods)
		}
		topos = append(topos, topo)
	}
	a, b := *topos[0], *topos[1]
	if a.EPPConfig == b.EPPConfig {
		t.Fatal("both lab topologies use the same EndpointPickerConfig")
	}
	a.Name, a.Description, a.EPPConfig = b.Name, b.Description, b.EPPConfig
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("the lab topologies differ beyond their EndpointPickerConfig:\n%+v\n%+v", a, b)
	}
}

// The engines' counters before and after a run give the hit rate over every pod's prompt
// tokens (computed + hit) and each pod's prefill work (its computed tokens).
func TestEngineDeltas(t *testing.T) {
	c := func(computed, hits float64) map[string]float64 {
		return map[string]float64{metricComputedTokens: computed, metricHitTokens: hits, "other": 1}
	}
	tests := []struct {
		name          string
		before, after []map[string]float64
		hit, spread   float64
		computed      []float64
	}{
		{"even", []map[string]float64{c(0, 0), c(0, 0)}, []map[string]float64{c(50, 50), c(50, 50)}, 0.5, 1, []float64{50, 50}},
		{"uneven, counters not at zero", []map[string]float64{c(1000, 900), c(10, 0)}, []map[string]float64{c(1300, 1300), c(110, 0)},
			0.5, 1.5, []float64{300, 100}},
		{"all on one pod of four", []map[string]float64{c(0, 0), c(0, 0), c(0, 0), c(0, 0)},
			[]map[string]float64{c(0, 10), c(0, 0), c(80, 10), c(0, 0)}, 0.2, 4, []float64{0, 0, 80, 0}},
		{"idle", []map[string]float64{c(5, 5)}, []map[string]float64{c(5, 5)}, 0, 0, []float64{0}},
		{"a pod missing its counters", []map[string]float64{{}, c(0, 0)}, []map[string]float64{{}, c(30, 10)}, 0.25, 2, []float64{0, 30}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r PrefixLabRun
			r.engineDeltas(tt.before, tt.after)
			if r.PrefixHitRate != tt.hit || r.Spread != tt.spread || !slices.Equal(r.Computed, tt.computed) {
				t.Fatalf("hit %v spread %v computed %v; want %v %v %v", r.PrefixHitRate, r.Spread, r.Computed, tt.hit, tt.spread, tt.computed)
			}
		})
	}
}
