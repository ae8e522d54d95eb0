package simbench

import (
	"math"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
	"github.com/pdgate/pdgate/plugins/lib/handoffcompat"
)

// Hidden labels: the recommended config pairs across handoff classes; shown: never. Every
// request ends once either way, and the rollout replaces every pod.
func TestCompatRunsCountIncompatiblePairs(t *testing.T) {
	rows := []workload.AzureRow{
		{Offset: 0, ContextTokens: 600, GeneratedTokens: 20},
		{Offset: 30 * time.Millisecond, ContextTokens: 1500, GeneratedTokens: 10},
		{Offset: 60 * time.Millisecond, ContextTokens: 900, GeneratedTokens: 40},
	}
	o := CompatDefaults()
	o.Root, o.Pods, o.Requests = repoFile(""), 8, 300
	prof := costmodel.Default()
	met := make([]map[int]bool, 2)
	for k, labelled := range []bool{false, true} {
		run, m, err := compatRun(o, prof, rows, 100, labelled)
		if err != nil {
			t.Fatal(err)
		}
		met[k] = m
		if len(m) != run.Served {
			t.Errorf("%s: outcomes of %d requests, want one per compatibly served request (%d)", run.Name, len(m), run.Served)
		}
		failed := 0
		for _, n := range run.Failed {
			failed += n
		}
		if run.Sent != o.Requests || run.Served+run.IncompatiblePairs+failed != run.Sent {
			t.Fatalf("%s: sent %d served %d incompatible %d failed %v", run.Name, run.Sent, run.Served, run.IncompatiblePairs, run.Failed)
		}
		sent, good := 0, 0.0
		for _, ph := range run.Phases {
			sent += ph.Sent
			good += ph.Goodput * float64(ph.Sent)
			if ph.Goodput > ph.IfHarmless {
				t.Errorf("%s: phase goodput %.3f above its if-harmless %.3f", run.Name, ph.Goodput, ph.IfHarmless)
			}
		}
		if sent != run.Sent || math.Abs(good-run.Goodput*float64(run.Sent)) > 1e-6 {
			t.Errorf("%s: phases hold %d requests and %.1f good ones, the run %d and %.1f", run.Name, sent, good, run.Sent, run.Goodput*float64(run.Sent))
		}
		if run.Phases[0].Sent == 0 || run.Phases[1].Sent == 0 || run.Phases[2].Sent == 0 {
			t.Errorf("%s: a phase without arrivals: %+v", run.Name, run.Phases)
		}
		if run.Replaced != o.Pods {
			t.Errorf("%s: %d pods rolled, want %d", run.Name, run.Replaced, o.Pods)
		}
		if labelled && run.IncompatiblePairs != 0 {
			t.Errorf("%s: %d incompatible pairs, want 0", run.Name, run.IncompatiblePairs)
		}
		if !labelled && run.IncompatiblePairs == 0 {
			t.Errorf("%s: no incompatible pair; the fleet does not exercise the check", run.Name)
		}
	}
	// Every request the unchecked router served compatibly is served by the checked one too.
	for id := range met[0] {
		if _, ok := met[1][id]; !ok {
			t.Fatalf("request %d served compatibly unchecked but not checked", id)
		}
	}
}

// Phases split by the arrival's time in the run, at the rollout's start and end.
func TestCompatPhaseOf(t *testing.T) {
	o := CompatOptions{RolloutStart: 0.25, RolloutEnd: 0.75}
	for _, tc := range []struct {
		f    float64
		want int
	}{{0, 0}, {0.2499, 0}, {0.25, 1}, {0.5, 1}, {0.7499, 1}, {0.75, 2}, {1, 2}} {
		if got := o.phaseOf(tc.f); got != tc.want {
			t.Errorf("phaseOf(%g) = %d, want %d", tc.f, got, tc.want)
		}
	}
}

// The paired comparison counts the unchecked run's compatibly served requests only, and
// reads the checked run's outcome of those very requests.
func TestPairedGoodput(t *testing.T) {
	tests := []struct {
		name               string
		unchecked, checked map[int]bool
		want               SameRequests
	}{
		{"none", nil, map[int]bool{1: true}, SameRequests{}},
		{"same outcomes", map[int]bool{1: true, 2: false}, map[int]bool{1: true, 2: false, 3: true}, SameRequests{2, 0.5, 0.5}},
		{"checked better", map[int]bool{1: false, 2: false}, map[int]bool{1: true, 2: true}, SameRequests{2, 0, 1}},
		{"missing in checked counts as missed", map[int]bool{1: true, 2: true}, map[int]bool{1: true}, SameRequests{2, 1, 0.5}},
	}
	for _, tc := range tests {
		if got := pairedGoodput(tc.unchecked, tc.checked); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCompatFleet(t *testing.T) {
	pods := CompatFleet(8, "m", "a", true)
	classes := map[handoffcompat.Spec][2]int{}
	for i, p := range pods {
		s, _ := handoffcompat.Of(p.Labels)
		if s.Get(handoffcompat.Revision) != "a" || s.Get(handoffcompat.Model) != "m" {
			t.Fatalf("pod %d declares %s", i, s)
		}
		c := classes[s]
		c[i%2]++
		classes[s] = c
	}
	if len(classes) != 4 {
		t.Fatalf("%d handoff classes, want 4", len(classes))
	}
	for s, c := range classes {
		if c[0] != 1 || c[1] != 1 {
			t.Errorf("class %s has %d prefill and %d decode pods, want 1 and 1", s, c[0], c[1])
		}
	}
	for _, p := range CompatFleet(8, "m", "a", false) {
		if s, _ := handoffcompat.Of(p.Labels); s.String() != "model=m" {
			t.Errorf("hidden fleet shows %s to the EPP", s)
		}
	}
}
