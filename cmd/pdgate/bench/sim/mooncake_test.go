package simbench

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/internal/listgen"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
	"github.com/pdgate/pdgate/cmd/sim/kvcache"
)

// A small conversation trace: block 0 is everyone's system prompt; rows 2 and 3 continue
// rows 0 and 1.
func mooncakeRows() []workload.MooncakeRow {
	r := func(ms int, in, out int, ids ...uint64) workload.MooncakeRow {
		return workload.MooncakeRow{Timestamp: time.Duration(ms) * time.Millisecond, InputLength: in, OutputLength: out, HashIDs: ids}
	}
	return []workload.MooncakeRow{
		r(0, 1500, 20, 0, 1, 2),
		r(0, 1100, 10, 0, 3, 4),
		r(1000, 2000, 30, 0, 1, 2, 5),
		r(1000, 1600, 5, 0, 3, 4, 6),
		r(2000, 700, 8, 0, 7),
	}
}

func TestParseTraceSpec(t *testing.T) {
	for _, tc := range []struct {
		in, name, file, err string
	}{
		{"mooncake=/data/t.jsonl", WorkloadMooncake, "/data/t.jsonl", ""},
		{"azure-conv=conv.csv", WorkloadAzure, "conv.csv", ""},
		{"mooncake", "", "", "want NAME=FILE"},
		{"mooncake=", "", "", "want NAME=FILE"},
		{"sharegpt=x.json", "", "", `trace "sharegpt" unknown`},
	} {
		got, err := ParseTraceSpec(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseTraceSpec(%q) error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got.Name != tc.name || got.File != tc.file {
			t.Errorf("ParseTraceSpec(%q) = %+v, %v", tc.in, got, err)
		}
	}
	o := Defaults()
	o.Trace = "nope"
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "--trace") {
		t.Errorf("Validate with a bad --trace: %v", err)
	}
}

// The replay: prompts of the rows' lengths, turns marked, shared id prefixes give shared
// prefix-cache blocks, later passes new text past the shared system prompt, the mean rate the
// asked one.
func TestMooncakeSource(t *testing.T) {
	rows := mooncakeRows()
	const rate = 50.0
	src, err := NewMooncakeSource(rows, rate, 2*len(rows))
	if err != nil {
		t.Fatal(err)
	}
	var as []Arrival
	for {
		a, ok := src.Next()
		if !ok {
			break
		}
		as = append(as, a)
	}
	if len(as) != 2*len(rows) {
		t.Fatalf("%d arrivals, want %d", len(as), 2*len(rows))
	}
	wantTurn := []Turn{TurnFirst, TurnFirst, TurnFollowUp, TurnFollowUp, TurnFirst}
	for i, a := range as {
		row := rows[i%len(rows)]
		if len(a.Tokens) != row.InputLength || a.Output != row.OutputLength || a.Turn != wantTurn[i%len(rows)] || a.Kind != WorkloadMooncake {
			t.Fatalf("arrival %d: %d tokens, output %d, turn %v; want %d, %d, %v", i, len(a.Tokens), a.Output, a.Turn, row.InputLength, row.OutputLength, wantTurn[i%len(rows)])
		}
		if i > 0 && a.At < as[i-1].At {
			t.Fatalf("arrival %d at %v before %v", i, a.At, as[i-1].At)
		}
	}
	shared := func(a, b Arrival) int {
		ha, hb := kvcache.BlockHashes(a.Tokens, 16), kvcache.BlockHashes(b.Tokens, 16)
		n := 0
		for n < min(len(ha), len(hb)) && ha[n] == hb[n] {
			n++
		}
		return n * 16
	}
	for _, tc := range []struct {
		name   string
		a, b   int
		tokens int
	}{
		{"follow-up shares its conversation: row 0's 1,500 tokens, 93 whole 16-token blocks", 0, 2, 1488},
		{"other conversation: the system prompt only", 0, 1, 512},
		{"next pass keeps the system prompt only", 0, 5, 512},
		{"next pass follow-up shares its own pass's conversation", 5, 7, 1488},
	} {
		if got := shared(as[tc.a], as[tc.b]); got != tc.tokens {
			t.Errorf("%s: %d shared tokens, want %d", tc.name, got, tc.tokens)
		}
	}
	// pass 2 starts one span after pass 1: 5 rows over 2 s + a mean gap of 0.5 s = 2.5 s of
	// trace at 2 req/s, compressed to 50 req/s
	if want := time.Duration(float64(2500*time.Millisecond) * (2.0 / rate)); as[5].At != want {
		t.Errorf("second pass starts at %v, want %v", as[5].At, want)
	}
}

// A run over the trace splits TTFT by turn and counts the fleet's computed prefill tokens.
func TestSimSummarySplitsTurns(t *testing.T) {
	src, err := NewMooncakeSource(mooncakeRows(), 20, 40)
	if err != nil {
		t.Fatal(err)
	}
	res := run(t, Config{Profile: costmodel.Default(), Pods: FleetCombined(2, "m"), Model: "m", Source: src,
		EPPConfig: repoFile("config/bench/routing/combined-least-request.yaml")})
	sm := res.Summary
	if sm.FirstTurnTTFT == nil || sm.FollowUpTTFT == nil {
		t.Fatalf("no per-turn TTFT in %+v", sm)
	}
	if len(res.ttftFirst) != 24 || len(res.ttftFollow) != 16 {
		t.Fatalf("%d first turns, %d follow-ups served; want 24, 16", len(res.ttftFirst), len(res.ttftFollow))
	}
	var prompt int64
	for range 8 {
		for _, r := range mooncakeRows() {
			prompt += int64(r.InputLength)
		}
	}
	if sm.PromptTokens != prompt || sm.ComputedPrefillTokens != prompt-res.cachedTokens || res.cachedTokens <= 0 {
		t.Fatalf("prompt %d computed %d (cached %d), want prompt %d and some hits", sm.PromptTokens, sm.ComputedPrefillTokens, res.cachedTokens, prompt)
	}
	if math.Abs(sm.PrefixHitRate-float64(res.cachedTokens)/float64(prompt)) > 1e-12 {
		t.Fatalf("hit rate %v", sm.PrefixHitRate)
	}
	// workloads without turns report none
	res = run(t, Config{Profile: costmodel.Default(), Pods: FleetCombined(1, "m"), Model: "m",
		Source: listgen.New([]Arrival{promptArrival(0, strings.Repeat("abcd", 100), 3)})})
	if res.Summary.FirstTurnTTFT != nil || res.Summary.FollowUpTTFT != nil || res.Summary.ComputedPrefillTokens != 100 {
		t.Fatalf("summary without turns: %+v", res.Summary)
	}
}

// The estimate's decode batch is what the KV capacity holds when fewer than 64 fit.
func TestCapacityPerGPUHonoursKVCapacity(t *testing.T) {
	p := costmodel.Default() // 400k tokens of KV
	for _, tc := range []struct {
		name          string
		prompt, out   float64
		kv, wantBatch int
	}{
		{"azure-like: 64 fit", 1155, 211, 400_000, 64},
		{"mooncake mean: 32 fit", 12035, 343, 400_000, 32},
		{"longest prompt: 3 fit", 126195, 1000, 400_000, 3},
		{"bigger than the KV: one at a time", 500_000, 10, 400_000, 1},
	} {
		q := *p
		q.KVCapacityTokens = tc.kv
		if got := referenceBatch(&q, tc.prompt, tc.out); got != tc.wantBatch {
			t.Errorf("%s: batch %d, want %d", tc.name, got, tc.wantBatch)
		}
	}
	// fewer sequences per step amortise the weights over fewer requests: lower capacity
	small := *p
	small.KVCapacityTokens = 100_000
	if CapacityPerGPU(&small, 12035, 343) >= CapacityPerGPU(p, 12035, 343) {
		t.Error("a smaller KV capacity must lower the long-prompt capacity")
	}
	if CapacityPerGPU(&small, 1000, 200) != CapacityPerGPU(p, 1000, 200) {
		t.Error("short prompts fit 64 either way: same capacity")
	}
}

// sim.md shows the per-turn table only for runs whose workload marks turns.
func TestTurnsTable(t *testing.T) {
	d := Dist{P50: 1, P90: 2, P99: 3}
	withTurns := RunData{Policy: "p", Summary: Summary{FirstTurnTTFT: &d, FollowUpTTFT: &Dist{P50: 4, P90: 5, P99: 6},
		PrefixHitRate: 0.25, PromptTokens: 2_000_000, ComputedPrefillTokens: 1_500_000}}
	for _, tc := range []struct {
		name string
		runs []RunData
		rows int
		want []string
	}{
		{"turns", []RunData{withTurns, {Policy: "azure"}}, 1, []string{"p", "1.0", "2.0", "3.0", "4.0", "5.0", "6.0", "0.250", "2.00", "1.50"}},
		{"no turns", []RunData{{Policy: "azure"}}, 0, nil},
	} {
		tab, ok := turnsTable(tc.runs)
		if ok != (tc.rows > 0) || len(tab.Rows) != tc.rows {
			t.Fatalf("%s: %d rows (shown %v), want %d", tc.name, len(tab.Rows), ok, tc.rows)
		}
		if tc.rows > 0 && strings.Join(tab.Rows[0], "|") != strings.Join(tc.want, "|") {
			t.Fatalf("%s: row %v, want %v", tc.name, tab.Rows[0], tc.want)
		}
	}
}
