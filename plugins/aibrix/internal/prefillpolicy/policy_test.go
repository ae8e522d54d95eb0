package prefillpolicy

import (
	"maps"
	"math"
	"slices"
	"testing"

	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
)

func TestEffectiveMatch(t *testing.T) {
	tests := []struct{ m, min, want float64 }{
		{50, 0, 50}, {50, 50, 50}, {49, 50, 0}, {120, 0, 100}, {-1, 0, 0}, {math.NaN(), 0, 0},
	}
	for _, tt := range tests {
		if got := EffectiveMatch(tt.m, tt.min); got != tt.want {
			t.Errorf("EffectiveMatch(%v,%v)=%v want %v", tt.m, tt.min, got, tt.want)
		}
	}
}

func TestScorePolicies(t *testing.T) {
	k := pdknobs.Defaults()
	k.MinMatchPct = 10
	tests := []struct {
		name   string
		policy string
		c      Candidate
		max    float64
		total  int
		want   float64
	}{
		// (100 − 40)·0.1 + 2/4 = 6.5
		{"prefix_cache", pdknobs.PrefillPrefixCache, Candidate{Count: 2, MatchPct: 40}, 4, 0, 6.5},
		// match 5 < minMatchPct 10 → 0: 10 + 0
		{"prefix_cache below min match", pdknobs.PrefillPrefixCache, Candidate{MatchPct: 5}, 1, 0, 10},
		{"least_request", pdknobs.PrefillLeastRequest, Candidate{Count: 3}, 3, 0, 3},
		{"token_load", pdknobs.PrefillTokenLoad, Candidate{LedgerScore: 4000}, 1, 0, 4000},
		// r = 0.5, d = 1 − 0.25·0.5 = 0.875; load 4000 → 3500
		{"hybrid load >= 1", pdknobs.PrefillHybridCacheLoad, Candidate{LedgerScore: 4000, MatchPct: 50}, 1, 0, 3500},
		// load 0.5 < 1 → d = 0.875
		{"hybrid load < 1", pdknobs.PrefillHybridCacheLoad, Candidate{LedgerScore: 0.5, MatchPct: 50}, 1, 0, 0.875},
		// load exactly 1 → 1·d
		{"hybrid load == 1", pdknobs.PrefillHybridCacheLoad, Candidate{LedgerScore: 1, MatchPct: 100}, 1, 0, 0.5},
	}
	for _, tt := range tests {
		if got := Score(tt.policy, tt.c, tt.max, tt.total, k); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: got %v want %v", tt.name, got, tt.want)
		}
	}
}

func TestConductorTTFT(t *testing.T) {
	fallback := 0.001*math.Pow(512, 1.5) + 5
	tests := []struct {
		name  string
		count float64
		match float64
		total int
		m     *engineattr.Metrics
		want  float64
	}{
		{"empty prompt idle", 0, 0, 0, nil, 0},
		// unmatched 100: 0.001·1000 + 5 = 6
		{"no match", 0, 0, 100, nil, 6},
		// matched 50: 0.005·50 + 1 = 1.25; unmatched 50: 0.001·50^1.5 + 5
		{"half match", 0, 50, 100, nil, 1.25 + 0.001*math.Pow(50, 1.5) + 5},
		// full match: prefill term 0
		{"full match", 0, 100, 100, nil, 0.005*100 + 1},
		{"queue with fallback prefill time", 2, 100, 100, nil, 2*fallback + 1.5},
		{"queue with histogram mean", 2, 100, 100, &engineattr.Metrics{PrefillTimeMean: 0.1, HasPrefillTimeMean: true}, 200 + 1.5},
		{"zero histogram mean uses fallback", 1, 100, 100, &engineattr.Metrics{PrefillTimeMean: 0, HasPrefillTimeMean: true}, fallback + 1.5},
	}
	for _, tt := range tests {
		if got := ConductorTTFT(tt.count, tt.match, tt.total, tt.m); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: got %v want %v", tt.name, got, tt.want)
		}
	}
}

func TestStdDevSkip(t *testing.T) {
	tests := []struct {
		name   string
		counts []float64
		sigma  float64
		want   []bool
	}{
		{"single pod kept", []float64{100}, 1, []bool{true}},
		{"equal counts kept", []float64{3, 3, 3}, 1, []bool{true, true, true}},
		// mean 4, sample sd = sqrt(((0-4)^2·2+(12-4)^2)/2) = sqrt(48) ≈ 6.93 → 12 > 10.93 skipped
		{"outlier skipped", []float64{0, 0, 12}, 1, []bool{true, true, false}},
		{"sigma 2 keeps it", []float64{0, 0, 12}, 2, []bool{true, true, true}},
		// boundary: count == mean + sd is kept (strict >)
		{"two pods: sample sd (n-1) keeps both", []float64{0, 2}, 1, []bool{true, true}},
	}
	for _, tt := range tests {
		got := StdDevSkip(tt.counts, tt.sigma)
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: got %v want %v", tt.name, got, tt.want)
				break
			}
		}
	}
	// mean 1, sd sqrt(2) → threshold 1+1.414=2.414; a count of exactly 3 with sigma such that
	// threshold equals it is kept.
	keep := StdDevSkip([]float64{0, 0, 3}, 1.1547005383792515) // sd = sqrt(3), mean 1 → 1+2 = 3
	if !keep[2] {
		t.Error("count equal to mean + sigma·sd must be kept")
	}
}

func TestPrefillFastPath(t *testing.T) {
	tests := []struct {
		name   string
		counts []float64
		spread int
		want   []int
	}{
		{"empty", nil, 16, nil},
		{"spread 16 does not fire (strict >)", []float64{16, 0}, 16, nil},
		{"spread 17 fires", []float64{17, 0, 0}, 16, []int{1, 2}},
		{"custom spread", []float64{3, 1, 5}, 2, []int{1}},
	}
	for _, tt := range tests {
		got, _ := FastPath(tt.counts, tt.spread)
		if len(got) != len(tt.want) {
			t.Errorf("%s: got %v want %v", tt.name, got, tt.want)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("%s: got %v want %v", tt.name, got, tt.want)
			}
		}
	}
}

func TestPrefixTable(t *testing.T) {
	pt := NewPrefixTable(4, 1000)
	a := pt.Prompt("abcdefghijkl")   // 3 blocks
	b := pt.Prompt("abcdefghXXXXYY") // 3 blocks, third differs, tail "YY" not counted
	if a.Blocks() != 3 || b.Blocks() != 3 {
		t.Fatalf("blocks %d %d", a.Blocks(), b.Blocks())
	}
	pt.Add("p1", a)
	m := pt.Match(b)
	if m["p1"] != 66 { // 2 of 3 blocks, integer percent
		t.Fatalf("match %v", m)
	}
	if m := pt.Match(a); m["p1"] != 100 {
		t.Fatalf("full match %v", m)
	}
	if m := pt.Match(pt.Prompt("zzzzabcd")); len(m) != 0 {
		t.Fatalf("blocks must not match out of position: %v", m)
	}
	if m := pt.Match(pt.Prompt("")); len(m) != 0 {
		t.Fatal("empty prompt")
	}
	pt.Forget("p1")
	if m := pt.Match(a); len(m) != 0 {
		t.Fatalf("forgotten pod matched: %v", m)
	}
	small := NewPrefixTable(4, 2)
	small.Add("x", small.Prompt("aaaabbbbcccc"))
	small.Add("y", small.Prompt("ddddeeee"))
	if small.Len() > 4 {
		t.Fatalf("eviction did not bound the table: %d", small.Len())
	}
}

func FuzzPrefixTable(f *testing.F) {
	f.Add("hello world, this is a prompt", "hello there")
	f.Fuzz(func(t *testing.T, a, b string) {
		pt := NewPrefixTable(4, 64)
		pt.Add("p", pt.Prompt(a))
		for _, v := range pt.Match(pt.Prompt(b)) {
			if v < 0 || v > 100 {
				t.Fatalf("match %v out of range", v)
			}
		}
	})
}

// AppendStdDevSkip appends StdDevSkip's flags after dst, over whatever a reused buffer held.
func TestAppendStdDevSkip(t *testing.T) {
	counts := []float64{0, 0, 12}
	stale := []bool{true, true, true, true, true, true}
	for _, dst := range [][]bool{nil, stale[:0], stale[:1], {false}} {
		prefix := slices.Clone(dst)
		got := AppendStdDevSkip(dst, counts, 1)
		want := append(prefix, StdDevSkip(counts, 1)...)
		if !slices.Equal(got, want) {
			t.Fatalf("after %v: got %v, want %v", prefix, got, want)
		}
	}
}

// A policy ReadsMetrics leaves out scores the same with and without a candidate's metrics,
// so callers may skip reading them; one it names does not.
func TestReadsMetrics(t *testing.T) {
	k := pdknobs.Defaults()
	m := &engineattr.Metrics{Running: 3, HasRunning: true, Waiting: 7, HasWaiting: true, GenThroughput: 50, HasGenThroughput: true,
		PrefillTimeMean: 0.4, HasPrefillTimeMean: true, DrainRate1m: 2, HasDrainRate1m: true}
	for _, policy := range pdknobs.PrefillPolicies {
		c := Candidate{Key: "p", Count: 2, MatchPct: 40, LedgerScore: 5}
		without := Score(policy, c, 4, 3000, k)
		c.Metrics = m
		with := Score(policy, c, 4, 3000, k)
		if differ := with != without; differ != ReadsMetrics(policy) {
			t.Errorf("%s: score %v with metrics, %v without; ReadsMetrics says %v", policy, with, without, ReadsMetrics(policy))
		}
	}
}

// MatchInto fills a reused map with what Match returns, ASCII and multibyte prompts alike.
func TestMatchInto(t *testing.T) {
	pt := NewPrefixTable(4, 1000)
	pt.Add("p1", pt.Prompt("abcdefghijkl"))
	pt.Add("p2", pt.Prompt("abcdXXXX"))
	pt.Add("p3", pt.Prompt("äöüßäöüßäöüß"))
	pt.Add("p4", pt.Prompt("äöüßxyz"))
	reused := map[string]float64{}
	for _, text := range []string{"abcdefghXXXX", "abcdXXXXabcd", "äöüßäöüßzzzz", "zzzz", ""} {
		p := pt.Prompt(text)
		pt.MatchInto(reused, p)
		if want := pt.Match(p); !maps.Equal(reused, want) {
			t.Fatalf("%q: MatchInto %v, Match %v", text, reused, want)
		}
		clear(reused)
	}
}
