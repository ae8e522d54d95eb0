package workload

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseMooncakeTrace(t *testing.T) {
	in := `{"timestamp": 0, "input_length": 1000, "output_length": 5, "hash_ids": [0, 1]}

{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [0], "extra": "ignored"}
{"timestamp": 3000.5, "input_length": 1025, "output_length": 7, "hash_ids": [0, 1, 2]}
`
	rows, err := ParseMooncakeTrace(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := []MooncakeRow{
		{Timestamp: 0, InputLength: 1000, OutputLength: 5, HashIDs: []uint64{0, 1}},
		{Timestamp: 0, InputLength: 512, OutputLength: 1, HashIDs: []uint64{0}},
		{Timestamp: 3000*time.Millisecond + 500*time.Microsecond, InputLength: 1025, OutputLength: 7, HashIDs: []uint64{0, 1, 2}},
	}
	if len(rows) != len(want) {
		t.Fatalf("got %d rows, want %d", len(rows), len(want))
	}
	for i := range want {
		g, w := rows[i], want[i]
		if g.Timestamp != w.Timestamp || g.InputLength != w.InputLength || g.OutputLength != w.OutputLength ||
			len(g.HashIDs) != len(w.HashIDs) {
			t.Fatalf("row %d: got %+v, want %+v", i, g, w)
		}
		for j := range w.HashIDs {
			if g.HashIDs[j] != w.HashIDs[j] {
				t.Fatalf("row %d: got %+v, want %+v", i, g, w)
			}
		}
	}
}

// Every malformed line is an error naming its line number and field.
func TestParseMooncakeTraceErrors(t *testing.T) {
	ok := `{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}` + "\n"
	for _, tc := range []struct {
		name, in, want string
	}{
		{"bad JSON", ok + `{"timestamp": 5,`, "line 2: unexpected end of JSON input"},
		{"not an object", `[1,2]`, "line 1: json: cannot unmarshal array"},
		{"string length", `{"timestamp": 0, "input_length": "600", "output_length": 3, "hash_ids": [0, 1]}`, "line 1: json: cannot unmarshal string into Go struct field mooncakeLine.input_length"},
		{"missing timestamp", `{"input_length": 600, "output_length": 3, "hash_ids": [0, 1]}`, "line 1: timestamp: missing"},
		{"missing input_length", `{"timestamp": 0, "output_length": 3, "hash_ids": [0, 1]}`, "line 1: input_length: missing"},
		{"missing output_length", `{"timestamp": 0, "input_length": 600, "hash_ids": [0, 1]}`, "line 1: output_length: missing"},
		{"missing hash_ids", `{"timestamp": 0, "input_length": 600, "output_length": 3}`, "line 1: hash_ids: missing"},
		{"negative timestamp", `{"timestamp": -1, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}`, "line 1: timestamp: must be in [0, 1e12] ms, got -1"},
		{"zero input", ok + `{"timestamp": 5, "input_length": 0, "output_length": 3, "hash_ids": []}`, "line 2: input_length: must be in [1, 10000000], got 0"},
		{"negative output", `{"timestamp": 5, "input_length": 6, "output_length": -2, "hash_ids": [0]}`, "line 1: output_length: must be in [1, 10000000], got -2"},
		{"zero output", `{"timestamp": 5, "input_length": 6, "output_length": 0, "hash_ids": [0]}`, "line 1: output_length: must be in [1, 10000000], got 0"},
		{"too few ids", `{"timestamp": 5, "input_length": 1025, "output_length": 3, "hash_ids": [0, 1]}`, "line 1: hash_ids: 2 ids for input_length 1025, want ceil(1025/512) = 3"},
		{"partial block absent", `{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [0]}`, "line 1: hash_ids: 1 ids for input_length 600, want ceil(600/512) = 2"},
		{"too many ids", `{"timestamp": 5, "input_length": 512, "output_length": 3, "hash_ids": [0, 1]}`, "line 1: hash_ids: 2 ids for input_length 512, want ceil(512/512) = 1"},
		{"negative id", `{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [0, -1]}`, "line 1: hash_ids[1]: ids are non-negative, got -1"},
		{"id twice in a prompt", `{"timestamp": 5, "input_length": 1500, "output_length": 3, "hash_ids": [0, 1, 0]}`, "line 1: hash_ids[2]: id 0 repeats hash_ids[0]"},
		{"id moved", ok + `{"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}`, "line 2: hash_ids[0]: id 1 was hash_ids[1] on line 1"},
		{"backwards", ok + "\n" + `{"timestamp": 4, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}`, "line 3: timestamp: 4ms goes backwards (line 1: 5ms)"},
		{"empty", "\n\n", "mooncake trace: no requests"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseMooncakeTrace(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func FuzzMooncakeTrace(f *testing.F) {
	f.Add(`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}`)
	f.Add(`{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [0, 1]}` + "\n" +
		`{"timestamp": 3000, "input_length": 1100, "output_length": 3, "hash_ids": [0, 1, 2]}`)
	f.Add(`{"timestamp": 1.5, "input_length": 1, "output_length": 1, "hash_ids": [7]}`)
	f.Fuzz(func(t *testing.T, s string) {
		rows, err := ParseMooncakeTrace(strings.NewReader(s))
		if err != nil {
			return
		}
		text := NewBlockText(4)
		for i, r := range rows {
			if r.InputLength < 1 || r.OutputLength < 1 || len(r.HashIDs) != (r.InputLength+511)/512 ||
				r.Timestamp < 0 || (i > 0 && r.Timestamp < rows[i-1].Timestamp) {
				t.Fatalf("accepted an invalid row %+v", r)
			}
			if r.InputLength <= 1<<16 {
				if p := text.Prompt(r.Keys(0, nil), r.InputLength); len(p) != r.InputLength*BytesPerToken {
					t.Fatalf("row %d: prompt of %d bytes for %d tokens", i, len(p), r.InputLength)
				}
			}
		}
		off := MooncakeOffsets(rows)
		for i := 1; i < len(off); i++ {
			if off[i] < off[i-1] || off[i] < rows[i].Timestamp {
				t.Fatalf("offsets not monotonic or before the trace's: %v / %+v", off, rows)
			}
		}
	})
}

func TestMooncakeOffsetsSpreadBuckets(t *testing.T) {
	row := func(ms int) MooncakeRow {
		return MooncakeRow{Timestamp: time.Duration(ms) * time.Millisecond, InputLength: 1, OutputLength: 1, HashIDs: []uint64{0}}
	}
	for _, tc := range []struct {
		name string
		ts   []int
		want []time.Duration // ms
	}{
		{"buckets", []int{0, 0, 0, 3000, 3000, 6000}, []time.Duration{0, 1000, 2000, 3000, 4500, 6000}},
		{"last bucket over the mean gap", []int{0, 2000, 2000}, []time.Duration{0, 2000, 3000}},
		{"distinct kept", []int{0, 7, 19}, []time.Duration{0, 7, 19}},
		{"one bucket", []int{5, 5}, []time.Duration{5, 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rows []MooncakeRow
			for _, ms := range tc.ts {
				rows = append(rows, row(ms))
			}
			got := MooncakeOffsets(rows)
			for i, w := range tc.want {
				if got[i] != w*time.Millisecond {
					t.Fatalf("offsets %v, want %v ms", got, tc.want)
				}
			}
		})
	}
}

func TestAnalyzeMooncake(t *testing.T) {
	r := func(ids ...uint64) MooncakeRow {
		return MooncakeRow{InputLength: 512 * len(ids), OutputLength: 10, HashIDs: ids}
	}
	for _, tc := range []struct {
		name   string
		rows   []MooncakeRow
		common int
		follow []bool
		reused float64
	}{
		// block 0 is everyone's system prompt: only a conversation's own blocks make a follow-up
		{"shared system prompt", []MooncakeRow{r(0, 1, 2), r(0, 3), r(0, 1, 2, 4), r(0, 3, 5), r(0, 6)}, 1,
			[]bool{false, false, true, true, false}, 7.0 / 14},
		{"no common prefix", []MooncakeRow{r(1, 2), r(3), r(1, 4)}, 0, []bool{false, false, true}, 1.0 / 5},
		{"a repeated prompt", []MooncakeRow{r(1, 2), r(1, 2)}, 2, []bool{false, false}, 2.0 / 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, follow := AnalyzeMooncake(tc.rows)
			if st.CommonPrefixBlocks != tc.common || st.ReusedBlockShare != tc.reused {
				t.Fatalf("stats %+v, want common %d, reused %v", st, tc.common, tc.reused)
			}
			n := 0
			for i := range tc.follow {
				if follow[i] != tc.follow[i] {
					t.Fatalf("follow-ups %v, want %v", follow, tc.follow)
				}
				if follow[i] {
					n++
				}
			}
			if st.FollowUps != n {
				t.Fatalf("FollowUps %d, want %d", st.FollowUps, n)
			}
		})
	}
}

// The FAST'25 conversation trace parses whole; its published figures hold.
func TestMooncakeTraceFile(t *testing.T) {
	path := "../../../" + DefaultMooncakePath
	if _, err := os.Stat(path); err != nil {
		t.Skipf("trace not present: %v", err)
	}
	rows, err := LoadMooncakeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	st, follow := AnalyzeMooncake(rows)
	if st.Requests != 12031 || int(st.MeanPrompt) != 12035 || int(st.MeanOutput) != 342 || st.CommonPrefixBlocks != 1 ||
		st.ReusedBlockShare < 0.365 || st.ReusedBlockShare > 0.367 || st.Span != 3536999*time.Millisecond {
		t.Fatalf("stats %+v", st)
	}
	if st.FollowUps != 4658 || follow[0] {
		t.Fatalf("%d follow-ups, want 4658", st.FollowUps)
	}
	g, err := LoadMooncakeTrace(path, Options{TimeScale: 10, MaxTokensCap: 64, Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	first, _ := g.Next()
	var body struct {
		Prompt    string `json:"prompt"`
		MaxTokens int    `json:"max_tokens"`
	}
	if err := json.Unmarshal(first.Body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body.Prompt) != 6758*BytesPerToken || body.MaxTokens != 64 || first.Kind != KindMooncake || first.At != 0 {
		t.Fatalf("first request: %d prompt bytes, max_tokens %d, kind %s, at %v", len(body.Prompt), body.MaxTokens, first.Kind, first.At)
	}
	second, _ := g.Next()
	// the trace's first bucket holds 10 requests 3 s before the next: 300 ms apart, 30 ms at 10x
	if second.At != 30*time.Millisecond {
		t.Fatalf("second request at %v, want 30ms", second.At)
	}
}

func TestMooncakeConversations(t *testing.T) {
	r := func(ids ...uint64) MooncakeRow {
		return MooncakeRow{InputLength: 512 * len(ids), OutputLength: 1, HashIDs: ids}
	}
	rows := []MooncakeRow{r(0, 2, 5), r(0, 3), r(0, 2, 5, 7), r(0, 4), r(0, 3, 9), r(0)}
	for _, tc := range []struct {
		every int
		want  []int // kept rows
	}{
		{0, []int{0, 1, 2, 3, 4, 5}},
		{1, []int{0, 1, 2, 3, 4, 5}},
		{2, []int{0, 2, 3, 5}}, // conversations 2 and 4, and row 5's key is its only block, 0
		{3, []int{1, 4, 5}},
	} {
		got := MooncakeConversations(rows, tc.every)
		if len(got) != len(tc.want) {
			t.Fatalf("every %d: kept %d rows, want %v", tc.every, len(got), tc.want)
		}
		for i, w := range tc.want {
			if &got[i].HashIDs[0] != &rows[w].HashIDs[0] {
				t.Fatalf("every %d: row %d is not input row %d", tc.every, i, w)
			}
		}
	}
}
