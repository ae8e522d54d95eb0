package aibrixpdpair

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/aibrix/internal/bucketplanner"
	"github.com/pdgate/pdgate/plugins/aibrix/internal/decodepolicy"
	"github.com/pdgate/pdgate/plugins/aibrix/internal/prefillpolicy"
	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

func TestPairsStayInCompleteRolesets(t *testing.T) {
	pods, _ := mkPods(
		podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"},
		podSpec{name: "b-p", role: "prefill", roleset: "b"}, podSpec{name: "b-d0", role: "decode", roleset: "b"},
		podSpec{name: "b-d1", role: "decode", roleset: "b"},
		podSpec{name: "c-p", role: "prefill", roleset: "c"}, // incomplete
		podSpec{name: "e-d", role: "decode", roleset: "e"},  // incomplete
		podSpec{name: "x-d", role: "decode"},                // AIBrix pod without roleset: skipped
		podSpec{name: "f-p", role: "prefill", roleset: "f", extra: map[string]string{podmodel.LabelPodGroupIndex: "1"}},
		podSpec{name: "f-d", role: "decode", roleset: "f"}, // roleset f has only a follower prefill
	)
	s := newSel(t, nil)
	seen := map[string]int{}
	for i := 0; i < 60; i++ {
		d, err := s.Select(Input{RequestID: fmt.Sprint(i), Pods: pods, PromptText: "hello", Knobs: knobs(nil)})
		if err != nil {
			t.Fatal(err)
		}
		if d.Combined || d.Prefill == nil || d.Prefill.Roleset != d.Decode.Roleset {
			t.Fatalf("pair crossed rolesets or missing: %+v", d)
		}
		if d.Roleset != "a" && d.Roleset != "b" {
			t.Fatalf("incomplete roleset %q picked", d.Roleset)
		}
		seen[d.Decode.Key]++
	}
	if len(seen) < 2 {
		t.Fatalf("no spread across rolesets: %v", seen)
	}
}

func TestLLMDPodsWithoutRolesetPairFreely(t *testing.T) {
	pods, _ := mkPods(
		podSpec{name: "p", extra: map[string]string{podmodel.LabelLLMDRole: "prefill"}},
		podSpec{name: "d", extra: map[string]string{podmodel.LabelLLMDRole: "decode"}},
	)
	d, err := newSel(t, nil).Select(Input{RequestID: "r", Pods: pods, Knobs: knobs(nil)})
	if err != nil || d.Prefill == nil || d.Prefill.Name != "p" || d.Decode.Name != "d" {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestBucketingAndCombinedFallback(t *testing.T) {
	fleet := []podSpec{
		{name: "s-p", role: "prefill", roleset: "short", config: bucketCfg(0, 100, false)},
		{name: "s-d", role: "decode", roleset: "short", config: bucketCfg(0, 100, false)},
		{name: "l-p", role: "prefill", roleset: "long", config: bucketCfg(101, 1000, false)},
		{name: "l-d", role: "decode", roleset: "long", config: bucketCfg(101, 1000, false)},
		{name: "half-p", role: "prefill", roleset: "half", config: bucketCfg(2000, 3000, false)},
		{name: "half-d", role: "decode", roleset: "half", config: bucketCfg(0, 10, false)},
	}
	combined := podSpec{name: "std", role: "all", roleset: "std", config: bucketCfg(0, 0, true)}
	tests := []struct {
		name      string
		prompt    int
		withStd   bool
		wantRS    string
		wantComb  bool
		wantErr   string
		bucketing bool
	}{
		{name: "inclusive lower bound", prompt: 0, bucketing: true, wantRS: "short"},
		{name: "inclusive upper bound", prompt: 100, bucketing: true, wantRS: "short"},
		{name: "next bucket", prompt: 101, bucketing: true, wantRS: "long"},
		{name: "upper bound of long", prompt: 1000, bucketing: true, wantRS: "long"},
		{name: "no bucket, combined", prompt: 1001, bucketing: true, withStd: true, wantComb: true},
		{name: "half pair does not count", prompt: 2500, bucketing: true, withStd: true, wantComb: true},
		{name: "no bucket, no combined → 503", prompt: 5000, bucketing: true, wantErr: "no prompt-length bucket matches prompt length 5000"},
		{name: "bucketing off ignores bounds", prompt: 5000, bucketing: false, wantRS: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs := append([]podSpec(nil), fleet...)
			if tt.withStd {
				specs = append(specs, combined)
			}
			pods, _ := mkPods(specs...)
			d, err := newSel(t, nil).Select(Input{RequestID: "r", Pods: pods, PromptTokens: tt.prompt,
				Knobs: knobs(func(k *pdknobs.Knobs) { k.PromptLengthBucketing = tt.bucketing })})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || status(err) != 503 {
					t.Fatalf("err %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.Combined != tt.wantComb || (tt.wantRS != "" && d.Roleset != tt.wantRS) {
				t.Fatalf("got %+v", d)
			}
			if tt.wantComb && (d.Decode.Name != "std" || d.Prefill != nil) {
				t.Fatalf("combined pick %+v", d)
			}
		})
	}
}

func TestNoPairFallsBackToCombinedWithoutBucketing(t *testing.T) {
	pods, _ := mkPods(podSpec{name: "p", role: "prefill", roleset: "a"},
		podSpec{name: "std", extra: map[string]string{podmodel.LabelLLMDRole: "prefill-decode"}})
	d, err := newSel(t, nil).Select(Input{RequestID: "r", Pods: pods, Knobs: knobs(nil)})
	if err != nil || !d.Combined || d.Decode.Name != "std" {
		t.Fatalf("%+v %v", d, err)
	}
	onlyP, _ := mkPods(podSpec{name: "p", role: "prefill", roleset: "a"})
	if _, err := newSel(t, nil).Select(Input{RequestID: "r", Pods: onlyP, Knobs: knobs(nil)}); err == nil || !strings.Contains(err.Error(), "decode pods are not ready") {
		t.Fatalf("err %v", err)
	}
	onlyD, _ := mkPods(podSpec{name: "d", role: "decode", roleset: "a"})
	if _, err := newSel(t, nil).Select(Input{RequestID: "r", Pods: onlyD, Knobs: knobs(nil)}); err == nil || !strings.Contains(err.Error(), "prefill pods are not ready") {
		t.Fatalf("err %v", err)
	}
}

func q(waiting, drain float64) *engineattr.Metrics {
	return &engineattr.Metrics{Waiting: waiting, HasWaiting: true, DrainRate1m: drain, HasDrainRate1m: true}
}

func TestShouldPickCombined(t *testing.T) {
	tests := []struct {
		name                string
		prefill, decode, cm *engineattr.Metrics
		want                bool
	}{
		{"combined 0.25 is not low (strict <)", q(2, 1), q(0, 1), q(0.25, 1), false},
		{"combined 0.24 low, prefill 1.01 high", q(1.01, 1), q(0, 1), q(0.24, 1), true},
		{"prefill exactly 1.0 is not high", q(1, 1), q(1, 1), q(0, 1), false},
		{"decode high", q(0, 1), q(3, 1), q(0, 1), true},
		{"combined without drain rate is never low", q(5, 1), q(5, 1), &engineattr.Metrics{}, false},
		{"prefix prealloc queues count", &engineattr.Metrics{PrefillPrealloc: 2, DrainRate1m: 1, HasDrainRate1m: true}, q(0, 1), q(0, 1), true},
		{"PD without metrics is not hot", nil, nil, q(0, 1), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods, _ := mkPods(
				podSpec{name: "p", role: "prefill", roleset: "a", config: bucketCfg(0, 0, false), metrics: tt.prefill},
				podSpec{name: "d", role: "decode", roleset: "a", config: bucketCfg(0, 0, false), metrics: tt.decode},
				podSpec{name: "std", role: "all", roleset: "s", config: bucketCfg(0, 0, true), metrics: tt.cm},
			)
			d, err := newSel(t, nil).Select(Input{RequestID: "r", Pods: pods, PromptTokens: 10,
				Knobs: knobs(func(k *pdknobs.Knobs) { k.PromptLengthBucketing = true })})
			if err != nil {
				t.Fatal(err)
			}
			if d.Combined != tt.want {
				t.Fatalf("combined=%v want %v: %+v", d.Combined, tt.want, d)
			}
		})
	}
}

func TestPrefillFastPathNarrowsToRoleset(t *testing.T) {
	pods, _ := mkPods(
		podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"},
		podSpec{name: "b-p", role: "prefill", roleset: "b"}, podSpec{name: "b-d", role: "decode", roleset: "b"},
	)
	for _, tt := range []struct {
		load   int
		wantFP bool
	}{{16, false}, {17, true}} {
		s := newSel(t, nil)
		for i := 0; i < tt.load; i++ {
			s.Tracker.Register(fmt.Sprint("x", i), "ns/a-p", "")
		}
		d, err := s.Select(Input{RequestID: "r", Pods: pods, Knobs: knobs(nil), Explain: true})
		if err != nil {
			t.Fatal(err)
		}
		fired := false
		for _, n := range d.Notes {
			fired = fired || strings.HasPrefix(n, "prefill fast path")
		}
		if fired != tt.wantFP || d.PrefillFastPath != tt.wantFP || d.Roleset != "b" {
			t.Fatalf("load %d: fast path %v, roleset %s, notes %v", tt.load, fired, d.Roleset, d.Notes)
		}
	}
}

func TestDecodeFastPathAndTokenLoadIgnoresIt(t *testing.T) {
	run := func(n float64) *engineattr.Metrics { return &engineattr.Metrics{Running: n, HasRunning: true} }
	pods, _ := mkPods(
		podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a", metrics: run(20)},
		podSpec{name: "b-p", role: "prefill", roleset: "b"}, podSpec{name: "b-d", role: "decode", roleset: "b", metrics: run(4)},
	)
	d, err := newSel(t, nil).Select(Input{RequestID: "r", Pods: pods, Knobs: knobs(nil), Explain: true})
	if err != nil || d.Decode.Name != "b-d" || d.Prefill.Name != "b-p" || !d.DecodeFastPath ||
		!strings.Contains(strings.Join(d.Notes, "|"), "decode fast path: decode count spread 16 >= 16") {
		t.Fatalf("%+v %v", d, err)
	}
	// Without a trace to explain to, the same decision formats no notes.
	if quiet, err := newSel(t, nil).Select(Input{RequestID: "q", Pods: pods, Knobs: knobs(nil)}); err != nil ||
		quiet.Decode.Name != "b-d" || !quiet.DecodeFastPath || len(quiet.Notes) != 0 {
		t.Fatalf("unexplained selection: %+v %v", quiet, err)
	}
	l := newFakeLedger()
	l.decode["ns/b-d"] = 1e6 // the fast path would pick b-d; token_load must ignore it
	d, err = newSel(t, l.source()).Select(Input{RequestID: "r2", Pods: pods, BodyTokens: 10, Explain: true,
		Knobs: knobs(func(k *pdknobs.Knobs) { k.DecodeScorePolicy = pdknobs.DecodeTokenLoad })})
	if err != nil || d.Decode.Name != "a-d" || d.DecodeFastPath || !strings.Contains(strings.Join(d.Notes, "|"), "ignored under token_load") {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestFinalPairScore(t *testing.T) {
	m := func(n float64) *engineattr.Metrics { return &engineattr.Metrics{Running: n, HasRunning: true} }
	pods, _ := mkPods(
		podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a", metrics: m(0)},
		podSpec{name: "b-p", role: "prefill", roleset: "b"}, podSpec{name: "b-d", role: "decode", roleset: "b", metrics: m(3)},
	)
	k := knobs(func(k *pdknobs.Knobs) {
		k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillLeastRequest, pdknobs.DecodeLeastRequest
	})
	tests := []struct {
		name      string
		aPrefills int
		want      string
		final     float64
	}{
		// a: 0/1 + 0/3 = 0; b: 2/2 + 3/3 = 2 → a.
		{"a idle on both sides", 0, "a", 0},
		// a: 3/3 + 0/3 = 1; b: 0/3 + 3/3 = 1 → tie, either.
		{"tie", 3, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSel(t, nil)
			for i := 0; i < tt.aPrefills; i++ {
				s.Tracker.Register(fmt.Sprint("a", i), "ns/a-p", "")
			}
			d, err := s.Select(Input{RequestID: "r", Pods: pods, Knobs: k})
			if err != nil || (tt.want != "" && d.Roleset != tt.want) || math.Abs(d.FinalScore-tt.final) > 1e-9 {
				t.Fatalf("%+v %v", d, err)
			}
		})
	}
}

// selectConcurrently runs n selections of in at once, as requests "0" … "n-1", failing t on
// any error, and returns when all are done.
func selectConcurrently(t *testing.T, s *Selector, n int, in Input) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			in := in
			in.RequestID = fmt.Sprint(i)
			if _, err := s.Select(in); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

func TestBurstSpreadsAcrossPairs(t *testing.T) {
	var specs []podSpec
	for _, rs := range []string{"a", "b", "c", "d"} {
		specs = append(specs, podSpec{name: rs + "-p", role: "prefill", roleset: rs}, podSpec{name: rs + "-d", role: "decode", roleset: rs})
	}
	pods, _ := mkPods(specs...)
	s := newSel(t, nil)
	k := knobs(func(k *pdknobs.Knobs) {
		k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillLeastRequest, pdknobs.DecodeLeastRequest
	})
	selectConcurrently(t, s, 40, Input{Pods: pods, Knobs: k})
	for _, rs := range []string{"a", "b", "c", "d"} {
		if n := s.Tracker.PrefillCount("ns/" + rs + "-p"); n != 10 {
			t.Fatalf("burst did not spread evenly: %s-p has %v", rs, n)
		}
		if n := s.Tracker.PendingDecode("ns/" + rs + "-d"); n != 10 {
			t.Fatalf("burst did not spread evenly: %s-d has %v", rs, n)
		}
	}
}

func TestTokenLoadChargesInsideAtomically(t *testing.T) {
	pods, _ := mkPods(
		podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"},
		podSpec{name: "b-p", role: "prefill", roleset: "b"}, podSpec{name: "b-d", role: "decode", roleset: "b"},
	)
	l := newFakeLedger()
	s := newSel(t, l.source())
	k := knobs(func(k *pdknobs.Knobs) {
		k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillTokenLoad, pdknobs.DecodeTokenLoad
	})
	selectConcurrently(t, s, 20, Input{Pods: pods, BodyTokens: 100, Knobs: k})
	if l.outsideTx != 0 || len(l.charges) != 40 {
		t.Fatalf("charges %d, outside tx %d", len(l.charges), l.outsideTx)
	}
	// Each charge is 3500 + 100; the ledger reads see earlier charges, so load splits evenly.
	if l.prefill["ns/a-p"] != 10*3600 || l.prefill["ns/b-p"] != 10*3600 || l.decode["ns/a-d"] != 1000 || l.decode["ns/b-d"] != 1000 {
		t.Fatalf("uneven: %v %v", l.prefill, l.decode)
	}
	// Hybrid charges only the unmatched share when the prompt matches the picked pod's prefix.
	l2 := newFakeLedger()
	s2 := newSel(t, l2.source())
	kh := knobs(func(k *pdknobs.Knobs) { k.PrefillScorePolicy = pdknobs.PrefillHybridCacheLoad })
	prompt := strings.Repeat("abcd", 25)
	if _, err := s2.Select(Input{RequestID: "h1", Pods: pods, PromptText: prompt, BodyTokens: 100, Knobs: kh}); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Select(Input{RequestID: "h2", Pods: pods, PromptText: prompt, BodyTokens: 100, Knobs: kh}); err != nil {
		t.Fatal(err)
	}
	if len(l2.charges) != 2 || !strings.HasSuffix(l2.charges[0], " 3600") {
		t.Fatalf("hybrid charges %v", l2.charges)
	}
}

func TestMissingLedgerDegrades(t *testing.T) {
	pods, _ := mkPods(podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"})
	d, err := newSel(t, nil).Select(Input{RequestID: "r", Pods: pods,
		Knobs: knobs(func(k *pdknobs.Knobs) { k.PrefillScorePolicy = pdknobs.PrefillTokenLoad })})
	if err != nil || !d.LedgerMissing || d.PrefillPolicy != pdknobs.PrefillPrefixCache {
		t.Fatalf("%+v %v", d, err)
	}
}

func TestBucketServeBandsNarrowToOneRoleset(t *testing.T) {
	pods, _ := mkPods(
		podSpec{name: "a-p", role: "prefill", roleset: "a", config: bucketCfg(0, 0, false)},
		podSpec{name: "a-d", role: "decode", roleset: "a", config: bucketCfg(0, 0, false)},
		podSpec{name: "b-p", role: "prefill", roleset: "b", config: bucketCfg(0, 0, false)},
		podSpec{name: "b-d", role: "decode", roleset: "b", config: bucketCfg(0, 0, false)},
	)
	now := time.Unix(1000, 0)
	s := NewSelector(NewTracker(0, nil), prefillpolicy.NewPrefixTable(4, 1<<16), nil, bucketplanner.New(nil), 3)
	s.Now = func() time.Time { return now }
	k := knobs(func(k *pdknobs.Knobs) {
		k.PromptLengthBucketing, k.BucketServe, k.BucketServeMode = true, true, pdknobs.ModeRPS
	})
	// Learn a bimodal distribution, then let the plan refresh.
	for i := 0; i < 20; i++ {
		for _, L := range []int{100, 5000} {
			if _, err := s.Select(Input{RequestID: fmt.Sprint("w", i, L), Model: "m", Pods: pods, PromptTokens: L, Knobs: k}); err != nil {
				t.Fatal(err)
			}
		}
	}
	now = now.Add(bucketplanner.RefreshInterval)
	rolesetFor := map[int]string{}
	for i := 0; i < 10; i++ {
		for _, L := range []int{100, 5000} {
			d, err := s.Select(Input{RequestID: fmt.Sprint("r", i, L), Model: "m", Pods: pods, PromptTokens: L, Knobs: k})
			if err != nil {
				t.Fatal(err)
			}
			if d.BandRoleset == "" {
				t.Fatalf("no band for %d: %+v", L, d)
			}
			if prev, ok := rolesetFor[L]; ok && prev != d.Roleset {
				t.Fatalf("length %d moved from roleset %s to %s", L, prev, d.Roleset)
			}
			rolesetFor[L] = d.Roleset
		}
	}
	if rolesetFor[100] == rolesetFor[5000] {
		t.Fatalf("bands must split the shared range between the rolesets: %v", rolesetFor)
	}
}

func TestInfiniteDecodeScoreNeverWinsThePair(t *testing.T) {
	pods, _ := mkPods(
		podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"},
		podSpec{name: "b-p", role: "prefill", roleset: "b"}, podSpec{name: "b-d", role: "decode", roleset: "b"},
	)
	l := newFakeLedger()
	l.decode["ns/a-d"] = math.Inf(1) // maxD = +Inf: a's term is Inf/Inf = NaN, b's is 0
	for seed := int64(1); seed <= 8; seed++ {
		s := NewSelector(NewTracker(0, nil), prefillpolicy.NewPrefixTable(4, 1<<10), l.source(), nil, seed)
		d, err := s.Select(Input{RequestID: fmt.Sprint(seed), Pods: pods,
			Knobs: knobs(func(k *pdknobs.Knobs) { k.DecodeScorePolicy = pdknobs.DecodeTokenLoad })})
		if err != nil || d.Roleset != "b" {
			t.Fatalf("seed %d: %+v %v", seed, d, err)
		}
	}
	l2 := newFakeLedger()
	l2.decode["ns/a-d"], l2.decode["ns/b-d"] = math.Inf(1), math.Inf(1)
	_, err := newSel(t, l2.source()).Select(Input{RequestID: "r", Pods: pods,
		Knobs: knobs(func(k *pdknobs.Knobs) { k.DecodeScorePolicy = pdknobs.DecodeTokenLoad })})
	if err == nil || status(err) != 503 {
		t.Fatalf("all-NaN pair scores must fail with 503, got %v", err)
	}
}

func status(err error) int { s, _ := StatusOf(err); return s }

// A prefill decider that says no turns the pair's pick into a decode-only one: same decode pod,
// no prefill registration, charge or prefix record; a yes keeps the pair as it was.
func TestPrefillDeciderComposes(t *testing.T) {
	pods, _ := mkPods(
		podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"},
	)
	cases := []struct {
		name        string
		run         bool
		wantPrefill bool
		wantCharges []string
	}{
		{"decider says prefill", true, true, []string{"prefill ns/a-p ", "decode ns/a-d 10"}},
		{"decider says decode-only", false, false, []string{"decode ns/a-d 10"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := newFakeLedger()
			s := newSel(t, l.source())
			asked := ""
			in := Input{RequestID: "r", Pods: pods, BodyTokens: 10, PromptText: strings.Repeat("x", 64),
				Knobs: knobs(func(k *pdknobs.Knobs) {
					k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillTokenLoad, pdknobs.DecodeTokenLoad
				}),
				PrefillNeeded: func(decode *podmodel.Pod) contract.Decision {
					asked = decode.Key
					return contract.Decision{Run: tc.run, Cause: contract.CauseCached, Reason: "because"}
				}}
			d, err := s.Select(in)
			if err != nil {
				t.Fatal(err)
			}
			if asked != "ns/a-d" || d.Decode.Key != "ns/a-d" {
				t.Fatalf("decider asked about %q, decode %q", asked, d.Decode.Key)
			}
			if (d.Prefill != nil) != tc.wantPrefill || d.DecodeOnly == tc.wantPrefill {
				t.Fatalf("prefill %v decodeOnly %v, want prefill %v", d.Prefill, d.DecodeOnly, tc.wantPrefill)
			}
			if !tc.wantPrefill && (d.Cause != contract.CauseCached || !strings.Contains(d.Reason, "because")) {
				t.Fatalf("cause %q reason %q must be the decider's", d.Cause, d.Reason)
			}
			if got := s.Tracker.PrefillCount("ns/a-p"); got != map[bool]float64{true: 1, false: 0}[tc.wantPrefill] {
				t.Fatalf("prefill in flight %g", got)
			}
			if s.Tracker.PendingDecode("ns/a-d") != 1 {
				t.Fatal("the decode pod must count the request")
			}
			if len(l.charges) != len(tc.wantCharges) {
				t.Fatalf("charges %v, want %v", l.charges, tc.wantCharges)
			}
			for i, c := range tc.wantCharges {
				if !strings.HasPrefix(l.charges[i], c) {
					t.Fatalf("charges %v, want %v", l.charges, tc.wantCharges)
				}
			}
		})
	}
}

// With a prefill decider, the decode pods it finds holding the prompt are the only candidates
// (any other would need a remote prefill); when none or all hold it, nothing is narrowed.
func TestCacheAffinityNarrowsDecode(t *testing.T) {
	pods, _ := mkPods(
		podSpec{name: "p", role: "prefill", roleset: "a"},
		podSpec{name: "d1", role: "decode", roleset: "a"}, podSpec{name: "d2", role: "decode", roleset: "a"},
		podSpec{name: "d3", role: "decode", roleset: "a"},
	)
	cases := []struct {
		name      string
		holders   map[string]bool
		wantPod   string // "" = any
		affinity  bool
		wantNoPre bool
	}{
		{"one holder wins", map[string]bool{"ns/d2": true}, "ns/d2", true, true},
		{"no holder: no narrowing", map[string]bool{}, "", false, false},
		{"every pod holds it: no narrowing", map[string]bool{"ns/d1": true, "ns/d2": true, "ns/d3": true}, "", false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < 20; i++ { // random tie-breaks must not matter
				s := NewSelector(NewTracker(time.Minute, nil), nil, nil, nil, int64(i+1))
				d, err := s.Select(Input{RequestID: fmt.Sprint("r", i), Pods: pods, Knobs: knobs(nil),
					PrefillNeeded: func(decode *podmodel.Pod) contract.Decision {
						if tc.holders[decode.Key] {
							return contract.Decision{Cause: contract.CauseCached, Reason: "held"}
						}
						return contract.Decision{Run: true, Cause: contract.CauseUncached}
					}})
				if err != nil {
					t.Fatal(err)
				}
				if (tc.wantPod != "" && d.Decode.Key != tc.wantPod) || d.CacheAffinity != tc.affinity || d.DecodeOnly != tc.wantNoPre {
					t.Fatalf("decode %s affinity %v decodeOnly %v, want %q %v %v", d.Decode.Key, d.CacheAffinity, d.DecodeOnly, tc.wantPod, tc.affinity, tc.wantNoPre)
				}
			}
		})
	}
}

// combinedOverflow applies AIBrix's overflow rule without bucketing; without it (AIBrix's
// behaviour) a hybrid fleet's combined pod serves only when no pair exists.
func TestCombinedOverflowWithoutBucketing(t *testing.T) {
	pods, _ := mkPods(
		podSpec{name: "p", role: "prefill", roleset: "a", metrics: q(3, 1)},
		podSpec{name: "d", role: "decode", roleset: "a", metrics: q(0, 1)},
		podSpec{name: "c", metrics: q(0, 1)}, // role-less: serves whole requests
	)
	cases := []struct {
		name         string
		overflow     bool
		wantCombined bool
	}{
		{"AIBrix: no overflow without bucketing", false, false},
		{"combinedOverflow: a hot P/D tier overflows to the idle combined pod", true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d, err := newSel(t, nil).Select(Input{RequestID: "r", Pods: pods, Knobs: knobs(nil), CombinedOverflow: tc.overflow})
			if err != nil {
				t.Fatal(err)
			}
			if d.Combined != tc.wantCombined || (tc.wantCombined && (d.Decode.Name != "c" || d.Cause != contract.CauseOverflow)) {
				t.Fatalf("%+v", d)
			}
		})
	}
}

// decodeFirst turns AIBrix's equal sum into prefill/maxP + weight·decode/maxD while the least
// prefill score is below its threshold. Rolesets: a (prefill 2000, decode 1000) and b (prefill
// 500, decode 3000); maxP 2000, maxD 3000. Equal sum: a 1.333, b 1.25 → b. Weight 3: a 2,
// b 3.25 → a.
func TestDecodeFirst(t *testing.T) {
	pods, _ := mkPods(
		podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"},
		podSpec{name: "b-p", role: "prefill", roleset: "b"}, podSpec{name: "b-d", role: "decode", roleset: "b"},
	)
	k := knobs(func(k *pdknobs.Knobs) {
		k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillTokenLoad, pdknobs.DecodeTokenLoad
	})
	tests := []struct {
		name  string
		first *DecodeFirst
		want  string
		final float64
	}{
		{"AIBrix's sum without it", nil, "b", 0.25 + 1},
		{"decode first while the least prefill score is below the threshold", &DecodeFirst{Weight: 3, PrefillScoreBelow: 1000}, "a", 1 + 1},
		{"equal sum once every prefill pod is at the threshold", &DecodeFirst{Weight: 3, PrefillScoreBelow: 500}, "b", 0.25 + 1},
		{"weight 1 is the sum", &DecodeFirst{Weight: 1, PrefillScoreBelow: 1e9}, "b", 0.25 + 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newFakeLedger()
			l.prefill["ns/a-p"], l.prefill["ns/b-p"] = 2000, 500
			l.decode["ns/a-d"], l.decode["ns/b-d"] = 1000, 3000
			d, err := newSel(t, l.source()).Select(Input{RequestID: "r", Pods: pods, Knobs: k, DecodeFirst: tt.first, Explain: true})
			if err != nil || d.Roleset != tt.want || math.Abs(d.FinalScore-tt.final) > 1e-9 {
				t.Fatalf("got roleset %q score %g (%v), want %q %g; notes %q", d.Roleset, d.FinalScore, err, tt.want, tt.final, d.Notes)
			}
		})
	}
}

func TestDecodeFirstQuantile(t *testing.T) {
	q := func(v float64) *float64 { return &v }
	tests := []struct {
		name   string
		first  *DecodeFirst
		scores []float64
		want   float64
		at     float64
	}{
		{"the least loaded pod by default, below", &DecodeFirst{Weight: 5, PrefillScoreBelow: 1000}, []float64{4000, 500, 2000}, 5, 500},
		{"the least loaded pod by default, at or above", &DecodeFirst{Weight: 5, PrefillScoreBelow: 500}, []float64{4000, 500, 2000}, 1, 500},
		{"quantile 0.5 is the median", &DecodeFirst{Weight: 5, PrefillScoreBelow: 3000, Quantile: q(0.5)}, []float64{4000, 0, 2000}, 5, 2000},
		{"the median at or above", &DecodeFirst{Weight: 5, PrefillScoreBelow: 2000, Quantile: q(0.5)}, []float64{4000, 0, 2000}, 1, 2000},
		{"quantile 1 is the busiest pod", &DecodeFirst{Weight: 5, PrefillScoreBelow: 3000, Quantile: q(1)}, []float64{4000, 0, 2000}, 1, 4000},
		{"no decodeFirst", nil, []float64{0}, 1, math.NaN()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, at := tt.first.weight(append([]float64(nil), tt.scores...))
			if w != tt.want || (at != tt.at && !(math.IsNaN(at) && math.IsNaN(tt.at))) {
				t.Fatalf("weight %g at %g, want %g at %g", w, at, tt.want, tt.at)
			}
		})
	}
}

// partition's scratch is reused across requests: a smaller fleet after a larger one sees only
// its own rolesets and pods, and a released scratch holds no pointer into a request's pods.
func TestPartitionScratchReuse(t *testing.T) {
	big, _ := mkPods(podSpec{name: "p-c", role: "prefill", roleset: "rs-c"}, podSpec{name: "d-c", role: "decode", roleset: "rs-c"}, podSpec{name: "p-a", role: "prefill", roleset: "rs-a"},
		podSpec{name: "d-a", role: "decode", roleset: "rs-a"}, podSpec{name: "p-b", role: "prefill", roleset: "rs-b"}, podSpec{name: "d-b", role: "decode", roleset: "rs-b"}, podSpec{name: "d-b2", role: "decode", roleset: "rs-b"})
	small, _ := mkPods(podSpec{name: "d-x", role: "decode", roleset: "rs-x"}, podSpec{name: "p-x", role: "prefill", roleset: "rs-x"})
	describe := func(groups []*group) string {
		var b strings.Builder
		for _, g := range groups {
			fmt.Fprintf(&b, "%s:", g.name)
			for _, p := range g.prefill {
				fmt.Fprintf(&b, " P%s", p.Name)
			}
			for _, p := range g.decode {
				fmt.Fprintf(&b, " D%s", p.Name)
			}
			b.WriteString("; ")
		}
		return b.String()
	}
	sc := &partitionScratch{byName: map[string]*group{}}
	for _, tc := range []struct {
		pods []podmodel.Pod
		want string
	}{
		{big, "rs-a: Pp-a Dd-a; rs-b: Pp-b Dd-b Dd-b2; rs-c: Pp-c Dd-c; "},
		{small, "rs-x: Pp-x Dd-x; "},
		{big, "rs-a: Pp-a Dd-a; rs-b: Pp-b Dd-b Dd-b2; rs-c: Pp-c Dd-c; "},
	} {
		groups, _ := partition(Input{Pods: tc.pods}, sc)
		if got := describe(groups); got != tc.want {
			t.Fatalf("groups %q, want %q", got, tc.want)
		}
		sc.reset() // release, without handing the scratch to the pool and so to another test
		for _, g := range sc.store {
			if len(g.prefill) != 0 || len(g.decode) != 0 || slices.ContainsFunc(g.prefill[:cap(g.prefill)], notNil) ||
				slices.ContainsFunc(g.decode[:cap(g.decode)], notNil) {
				t.Fatalf("released group %q keeps pods", g.name)
			}
		}
		if len(sc.byName) != 0 || len(sc.groups) != 0 || slices.ContainsFunc(sc.groups[:cap(sc.groups)], func(g *group) bool { return g != nil }) {
			t.Fatal("released scratch keeps groups")
		}
	}
}

func notNil(p *podmodel.Pod) bool { return p != nil }

// A selection under a token ledger passes the cascade's arguments through the selector's own
// call record; once it returns, that record keeps nothing of the request (its pods, its
// decision) alive.
func TestLedgerCallKeepsNothing(t *testing.T) {
	pods, _ := mkPods(podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"})
	s := newSel(t, newFakeLedger().source())
	d, err := s.Select(Input{RequestID: "r1", Pods: pods, BodyTokens: 10,
		Knobs: knobs(func(k *pdknobs.Knobs) {
			k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillTokenLoad, pdknobs.DecodeTokenLoad
		})})
	if err != nil || d.Decode.Name != "a-d" || d.Prefill == nil || d.Prefill.Name != "a-p" {
		t.Fatalf("%+v %v", d, err)
	}
	if c := s.call; c.in.Pods != nil || c.eligible != nil || c.ledger != nil || c.out.Decode.Key != "" || c.d.PrefillPolicy != "" || c.run == nil {
		t.Fatalf("the selector's call record keeps the request: %+v", c)
	}
}

// The cascade's scratch is the selector's, reused by every request: once a selection returns
// it holds no pointer into the request's pods and no scores, whichever path the cascade took
// (cache affinity, remaining work, token policies).
func TestCascadeScratchKeepsNothing(t *testing.T) {
	pods, _ := mkPods(podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"},
		podSpec{name: "b-p", role: "prefill", roleset: "b"}, podSpec{name: "b-d", role: "decode", roleset: "b"})
	tokenLoad := knobs(func(k *pdknobs.Knobs) {
		k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillTokenLoad, pdknobs.DecodeTokenLoad
	})
	for _, in := range []Input{
		{RequestID: "plain", Pods: pods, Knobs: knobs(nil)},
		{RequestID: "affinity", Pods: pods, Knobs: knobs(nil), PrefillNeeded: func(d *podmodel.Pod) contract.Decision {
			if d.Name == "b-d" {
				return contract.Decision{Cause: contract.CauseCached}
			}
			return contract.Decision{Run: true, Cause: contract.CausePaired}
		}},
		{RequestID: "tokens", Pods: pods, BodyTokens: 100, PromptTokens: 100, Knobs: tokenLoad, RemainingWork: &RemainingWork{}},
	} {
		s := newSel(t, newFakeLedger().source())
		if _, err := s.Select(in); err != nil {
			t.Fatalf("%s: %v", in.RequestID, err)
		}
		sc := s.scratch
		for name, pods := range map[string][]*podmodel.Pod{"prefill": sc.prefill, "decode": sc.decode, "cached": sc.cached, "affinity": sc.affinity} {
			if slices.ContainsFunc(pods[:cap(pods)], notNil) {
				t.Fatalf("%s: the scratch's %s list keeps pods", in.RequestID, name)
			}
		}
		if slices.ContainsFunc(sc.cands[:cap(sc.cands)], func(c decodepolicy.Candidate) bool { return c.Key != "" }) ||
			slices.ContainsFunc(sc.names[:cap(sc.names)], func(n string) bool { return n != "" }) {
			t.Fatalf("%s: the scratch keeps candidates or roleset names", in.RequestID)
		}
		if len(sc.pScores)+len(sc.dScores)+len(sc.rates)+len(sc.remaining) != 0 {
			t.Fatalf("%s: the scratch keeps scores", in.RequestID)
		}
	}
}

// countingEndpoint counts the reads of its engine metrics, each of which copies them.
type countingEndpoint struct {
	fwksched.Endpoint
	reads *int
}

func (e countingEndpoint) Get(key string) (fwkdl.Cloneable, bool) {
	if key == engineattr.AttributeKey {
		*e.reads++
	}
	return e.Endpoint.Get(key)
}

// The prefill pods' engine metrics are read only under a prefill policy that scores them
// (conductor); the decode pods' are read once each, for the decode candidates.
func TestPrefillMetricsReadOnlyWhenScored(t *testing.T) {
	m := &engineattr.Metrics{Running: 1, HasRunning: true, GenThroughput: 10, HasGenThroughput: true}
	specs := []podSpec{{name: "a-p", role: "prefill", roleset: "a", metrics: m}, {name: "a-d", role: "decode", roleset: "a", metrics: m},
		{name: "b-p", role: "prefill", roleset: "b", metrics: m}, {name: "b-d", role: "decode", roleset: "b", metrics: m}}
	for _, tc := range []struct {
		policy string
		want   map[string]int
	}{
		{pdknobs.PrefillPrefixCache, map[string]int{"a-d": 1, "b-d": 1}},
		{pdknobs.PrefillLeastRequest, map[string]int{"a-d": 1, "b-d": 1}},
		{pdknobs.PrefillConductor, map[string]int{"a-p": 1, "a-d": 1, "b-p": 1, "b-d": 1}},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			reads := map[string]*int{}
			var pods []podmodel.Pod
			for _, s := range specs {
				n := new(int)
				reads[s.name] = n
				pods = append(pods, podmodel.FromEndpoint(countingEndpoint{Endpoint: mkEndpoint(s), reads: n}))
			}
			if _, err := newSel(t, nil).Select(Input{RequestID: "r", Pods: pods, PromptText: "hello",
				Knobs: knobs(func(k *pdknobs.Knobs) { k.PrefillScorePolicy = tc.policy })}); err != nil {
				t.Fatal(err)
			}
			got := map[string]int{}
			for name, n := range reads {
				if *n > 0 {
					got[name] = *n
				}
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("metrics reads %v, want %v", got, tc.want)
			}
		})
	}
}

// rateTx records what the decode-rate callback answers for each pod the ledger asks about.
type rateTx struct {
	fakeTx
	seen map[tokenload.PodKey]float64
}

func (x rateTx) Decode(p tokenload.PodKey, rate tokenload.DecodeRate) float64 {
	if r, ok := rate(p); ok {
		x.seen[p] = r
	}
	return x.fakeTx.Decode(p, rate)
}

type rateLedger struct {
	*fakeLedger
	seen map[tokenload.PodKey]float64
}

func (l rateLedger) Atomically(fn func(tx tokenload.Tx)) {
	l.fakeLedger.Atomically(func(tx tokenload.Tx) { fn(rateTx{fakeTx: tx.(fakeTx), seen: l.seen}) })
}

// Under token_load the ledger asks each decode pod's generation rate per request (throughput
// over running requests); every request answers from its own pods' metrics.
func TestDecodeRatesPerRequest(t *testing.T) {
	k := knobs(func(k *pdknobs.Knobs) { k.DecodeScorePolicy = pdknobs.DecodeTokenLoad })
	for _, tc := range []struct {
		throughput float64
		want       float64
	}{{40, 20}, {90, 45}} {
		m := &engineattr.Metrics{Running: 2, HasRunning: true, GenThroughput: tc.throughput, HasGenThroughput: true}
		pods, _ := mkPods(podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a", metrics: m})
		l := rateLedger{fakeLedger: newFakeLedger(), seen: map[tokenload.PodKey]float64{}}
		s := newSel(t, func() (tokenload.Ledger, tokenload.Defaults, error) {
			return l, tokenload.Defaults{RequestCost: 1}, nil
		})
		for _, id := range []string{"r1", "r2"} {
			if _, err := s.Select(Input{RequestID: id, Pods: pods, BodyTokens: 10, Knobs: k}); err != nil {
				t.Fatal(err)
			}
			if got := l.seen["ns/a-d"]; got != tc.want {
				t.Fatalf("%s: rate %v for a-d, want %v", id, got, tc.want)
			}
			s.Tracker.Done(id) // not pending on a-d for the next request's rate
		}
	}
}

// The reasons built without fmt read exactly as the fmt formats they replace.
func TestReasonsMatchFmt(t *testing.T) {
	for _, roleset := range []string{"", "rs-0", `a"b`, "rs-ü", strings.Repeat("r", 200)} {
		for _, wD := range []float64{1, 5, 0.2, 0.5, 1e-9} {
			for _, score := range []float64{0, math.Copysign(0, -1), 1.5, 2, 1234567, 1.2345e-5, math.Inf(1), math.NaN(), 123.456789} {
				want := fmt.Sprintf("roleset %q minimises prefill/maxPrefill + decode/maxDecode = %.4g", roleset, score)
				if wD != 1 {
					want = fmt.Sprintf("roleset %q minimises prefill/maxPrefill + %g·decode/maxDecode = %.4g (decode first)", roleset, wD, score)
				}
				if got := pairReason(roleset, wD, score); got != want {
					t.Fatalf("pairReason(%q, %g, %g) = %q, want %q", roleset, wD, score, got, want)
				}
			}
		}
		for _, pod := range []string{"ns/p-0", "", strings.Repeat("p", 200)} {
			if got, want := pairedPrefillReason(pod, roleset), fmt.Sprintf("paired prefill %s in roleset %q", pod, roleset); got != want {
				t.Fatalf("pairedPrefillReason(%q, %q) = %q, want %q", pod, roleset, got, want)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = pairReason("rs-0", 1, 1.5) }); n != 1 {
		t.Fatalf("pairReason allocated %v times, want 1 (the string)", n)
	}
}
