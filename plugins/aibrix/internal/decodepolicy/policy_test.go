package decodepolicy

import (
	"math"
	"slices"
	"testing"

	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
)

func TestFreePercent(t *testing.T) {
	tests := []struct{ usage, want float64 }{
		{0, 100}, {0.254, 75}, {0.255, 75}, {0.995, 1}, {0.996, 0.1}, {1, 0.1}, {1.5, 0.1}, {math.NaN(), 0.1},
	}
	for _, tt := range tests {
		if got := FreePercent(tt.usage); got != tt.want {
			t.Errorf("FreePercent(%v)=%v want %v", tt.usage, got, tt.want)
		}
	}
}

func TestNewCandidate(t *testing.T) {
	c := NewCandidate("p", nil, 2)
	if c.Count() != 2 || c.FreePct != 100 || c.HasRunning {
		t.Fatalf("missing metrics: %+v", c)
	}
	c = NewCandidate("p", &engineattr.Metrics{Running: 3, HasRunning: true, KVUsage: 0.5, HasKVUsage: true}, 2)
	if c.Count() != 5 || c.FreePct != 50 {
		t.Fatalf("%+v", c)
	}
}

func TestPolicies(t *testing.T) {
	k := pdknobs.Defaults()
	c := Candidate{Running: 4, HasRunning: true, Pending: 0, Throughput: 50, HasThroughput: true, FreePct: 50}
	mx := Maxima{Count: 8, Throughput: 100, Free: 100}
	tests := []struct {
		name   string
		policy string
		c      Candidate
		want   float64
	}{
		// (1·4/8 + 1·(1 − 50/100)) / (50/100) = 2
		{"load_balancing", pdknobs.DecodeLoadBalancing, c, 2},
		{"unknown name is load_balancing", "", c, 2},
		{"least_request", pdknobs.DecodeLeastRequest, c, 4},
		// 1000/50 = 20 ms · (1 + 1/4) = 25
		{"conductor", pdknobs.DecodeConductor, c, 25},
		// no throughput → 20 ms · (1 + 1/max(0,1)) = 40; usage 0.95 > 0.9 → ·1.5 = 60
		{"conductor fallback and pressure", pdknobs.DecodeConductor, Candidate{FreePct: 5}, 60},
		// usage exactly 0.9 is not > 0.9
		{"conductor pressure boundary", pdknobs.DecodeConductor, Candidate{FreePct: 10}, 40},
		{"token_load", pdknobs.DecodeTokenLoad, Candidate{LedgerTokens: 1234}, 1234},
	}
	for _, tt := range tests {
		if got := Score(tt.policy, tt.c, mx, k); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("%s: got %v want %v", tt.name, got, tt.want)
		}
	}
	k.DecodeLBWeightRunning, k.DecodeLBWeightThroughput = 2, 0.5
	// (2·4/8 + 0.5·0.5) / 0.5 = 2.5
	if got := Score(pdknobs.DecodeLoadBalancing, c, mx, k); math.Abs(got-2.5) > 1e-9 {
		t.Errorf("weights: %v", got)
	}
}

func TestComputeMaxima(t *testing.T) {
	mx := ComputeMaxima([]Candidate{{Pending: 0.5, FreePct: 0.1}, {Throughput: 0.5, HasThroughput: true, FreePct: 0.5}})
	if mx != (Maxima{1, 1, 1}) {
		t.Fatalf("floors of 1: %+v", mx)
	}
	mx = ComputeMaxima([]Candidate{{Running: 7, HasRunning: true, Pending: 1, FreePct: 80}, {Throughput: 900, HasThroughput: true, FreePct: 20}})
	if mx != (Maxima{8, 900, 80}) {
		t.Fatalf("%+v", mx)
	}
}

func TestScoreAllColdStartAndNaN(t *testing.T) {
	k := pdknobs.Defaults()
	cands := []Candidate{
		{Key: "warm", Running: 2, HasRunning: true, FreePct: 100},
		{Key: "cold", Pending: 3, FreePct: 100},
	}
	res, maxScore := ScoreAll(pdknobs.DecodeLeastRequest, cands, k)
	if len(res) != 2 || res[1].Score != 4 || !res[1].ColdStart || res[0].Score != 2 || maxScore != 4 {
		t.Fatalf("cold start: %+v max %v", res, maxScore)
	}
	// Nobody has the running metric: everyone is scored by the policy.
	res, _ = ScoreAll(pdknobs.DecodeLeastRequest, []Candidate{{Pending: 3, FreePct: 100}}, k)
	if res[0].ColdStart || res[0].Score != 3 {
		t.Fatalf("%+v", res)
	}
	// token_load ignores the cold-start gate.
	res, _ = ScoreAll(pdknobs.DecodeTokenLoad, []Candidate{{Running: 1, HasRunning: true, LedgerTokens: 5}, {LedgerTokens: 7}}, k)
	if res[1].ColdStart || res[1].Score != 7 {
		t.Fatalf("%+v", res)
	}
	// NaN → load_balancing retry; NaN again → skipped. +Inf is kept.
	res, maxScore = ScoreAll(pdknobs.DecodeTokenLoad, []Candidate{{LedgerTokens: math.NaN(), FreePct: 100}, {LedgerTokens: math.Inf(1)}}, k)
	if len(res) != 2 || !res[0].FallbackUsed || !math.IsInf(res[1].Score, 1) || !math.IsInf(maxScore, 1) {
		t.Fatalf("%+v %v", res, maxScore)
	}
	res, _ = ScoreAll(pdknobs.DecodeTokenLoad, []Candidate{{LedgerTokens: math.NaN(), FreePct: math.NaN()}}, k)
	if len(res) != 0 {
		t.Fatalf("NaN twice must be skipped: %+v", res)
	}
	_, maxScore = ScoreAll(pdknobs.DecodeLeastRequest, []Candidate{{}}, k)
	if maxScore != 0.01 {
		t.Fatalf("max score floor %v", maxScore)
	}
}

func TestFastPath(t *testing.T) {
	k := pdknobs.Defaults()
	run := func(n float64) Candidate { return Candidate{Running: n, HasRunning: true, FreePct: 100} }
	tests := []struct {
		name  string
		cands []Candidate
		want  int
	}{
		{"empty", nil, -1},
		{"count spread exactly 16 fires (>=)", []Candidate{run(20), run(4)}, 1},
		{"count spread 15 does not", []Candidate{run(19), run(4)}, -1},
		{"pods without running metric excluded from spread", []Candidate{run(1), {Pending: 100, FreePct: 100}}, -1},
		{"pending counts toward spread", []Candidate{{Running: 0, HasRunning: true, Pending: 16}, run(0)}, 1},
		{"throughput spread 2048 does not fire (>)", []Candidate{{Throughput: 2048, HasThroughput: true}, {Throughput: 0, HasThroughput: true}}, -1},
		{"throughput spread 2049 picks lowest", []Candidate{{Throughput: 2049, HasThroughput: true}, {Throughput: 0, HasThroughput: true}}, 1},
		{"missing throughput excluded", []Candidate{{Throughput: 5000, HasThroughput: true}, {}}, -1},
		{"drain ratio above 1.5", []Candidate{{Running: 4, HasRunning: true, Drain: 1, HasDrain: true}, {Running: 1, HasRunning: true, Drain: 1, HasDrain: true}}, 1},
		{"drain ratio exactly 1.5 does not fire", []Candidate{{Running: 3, HasRunning: true, Drain: 1, HasDrain: true}, {Running: 2, HasRunning: true, Drain: 1, HasDrain: true}}, -1},
		{"drain: one pod without rate disables", []Candidate{{Running: 9, HasRunning: true, Drain: 1, HasDrain: true}, {Running: 1, HasRunning: true}}, -1},
		{"drain: min score 0 disables", []Candidate{{Running: 9, HasRunning: true, Drain: 1, HasDrain: true}, {Running: 0, HasRunning: true, Drain: 1, HasDrain: true}}, -1},
		{"drain epsilon 0.1", []Candidate{{Running: 1, HasRunning: true, Drain: 0.01, HasDrain: true}, {Running: 1, HasRunning: true, Drain: 0.1, HasDrain: true}}, -1},
		{"tie goes to first", []Candidate{run(0), run(0), run(16)}, 0},
	}
	for _, tt := range tests {
		if got, _ := FastPath(tt.cands, k); got != tt.want {
			t.Errorf("%s: got %d want %d", tt.name, got, tt.want)
		}
	}
}

// AppendScores appends ScoreAll's results after dst, whatever a reused buffer held.
func TestAppendScores(t *testing.T) {
	k := pdknobs.Defaults()
	cands := []Candidate{
		{Key: "warm", Running: 2, HasRunning: true, FreePct: 100},
		{Key: "cold", Pending: 3, FreePct: 100},
	}
	want, wantMax := ScoreAll(pdknobs.DecodeLeastRequest, cands, k)
	stale := []Result{{Index: 7, Score: 9}, {Index: 8, Score: 9}, {Index: 9, Score: 9}}
	for _, dst := range [][]Result{nil, stale[:0], stale[:1]} {
		prefix := slices.Clone(dst)
		got, gotMax := AppendScores(dst, pdknobs.DecodeLeastRequest, cands, k)
		if !slices.Equal(got, append(prefix, want...)) || gotMax != wantMax {
			t.Fatalf("after %v: got %+v max %v, want %+v max %v", prefix, got, gotMax, append(prefix, want...), wantMax)
		}
	}
}
