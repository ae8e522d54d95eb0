package simbench

import (
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/internal/listgen"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// A prefill backlog on one prefill pod with two decode pods beside it: under the sidecar's
// prefill deadline the legs still queued at the deadline leave the prefill pod and their
// decode pods prefill them, so the backlog is served by three GPUs instead of one; with no
// deadline, or one no leg reaches, every prompt waits its turn on the prefill pod.
func TestPrefillDeadlineFallsBackLocal(t *testing.T) {
	prof := costmodel.Default()
	const n, prompt = 24, 6000
	var arrivals []Arrival
	for i := range n {
		text := workload.Text(rand.New(rand.NewSource(int64(i+1))), prompt)
		arrivals = append(arrivals, promptArrival(time.Duration(i)*time.Millisecond, text, 8))
	}
	// one prompt's prefill alone: the backlog's last leg waits about n of them
	one := prof.PrefillTime(len(arrivals[0].Tokens), 0)
	runWith := func(timeout time.Duration) *Result {
		return run(t, Config{Profile: prof, Pods: pdFleet(1, 2, "m"), Model: "m", EPPConfig: repoFile("config/llmd/pd.yaml"),
			Source: listgen.New(slices.Clone(arrivals)), PrefillRelease: true, PrefillTimeout: timeout})
	}
	none, far, short := runWith(0), runWith(time.Hour), runWith(4*one)
	for name, res := range map[string]*Result{"no deadline": none, "1 h": far, "4 prefills": short} {
		if res.sent != n || res.ended != n || len(res.ttft) != n {
			t.Fatalf("%s: sent %d ended %d served %d failed %v, want all %d served", name, res.sent, res.ended, len(res.ttft), res.failed, n)
		}
	}
	if none.Summary.PrefillFallbacks != 0 || far.Summary.PrefillFallbacks != 0 {
		t.Errorf("fallbacks without a deadline reached: %d and %d, want 0", none.Summary.PrefillFallbacks, far.Summary.PrefillFallbacks)
	}
	if !slices.Equal(none.ttft, far.ttft) {
		t.Errorf("a deadline no leg reaches changed the TTFTs:\n%v\n%v", none.ttft, far.ttft)
	}
	if got := short.Summary.PrefillFallbacks; got == 0 || got == n {
		t.Errorf("fallbacks at a deadline of 4 prefills: %d, want some of the %d legs (those still queued then)", got, n)
	}
	if worst, before := slices.Max(short.ttft), slices.Max(none.ttft); worst >= 0.75*before {
		t.Errorf("worst TTFT %.0f ms with the deadline, %.0f ms without: the decode pods took no share of the backlog", worst, before)
	}
	if short.Summary.Failed["engine: request cancelled"] != 0 {
		t.Errorf("a cancelled prefill leg failed its request: %v", short.Summary.Failed)
	}
}
