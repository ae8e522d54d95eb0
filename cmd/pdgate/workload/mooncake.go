package workload

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// MooncakeBlockTokens is the Mooncake traces' block size: every hash id stands for 512
// prompt tokens (the last block of a prompt holds the remainder).
const MooncakeBlockTokens = 512

// DefaultMooncakePath is the Mooncake FAST'25 conversation trace relative to the repository
// root.
const DefaultMooncakePath = "../shared/data/mooncake-fast25/conversation_trace.jsonl"

// MooncakeRow is one request of a Mooncake trace.
type MooncakeRow struct {
	// Timestamp is the arrival time since the start of the trace, as written (ms).
	Timestamp    time.Duration
	InputLength  int // prompt tokens
	OutputLength int // generated tokens
	// HashIDs name the prompt's 512-token blocks: equal ids are the same prefix block (the
	// ids are remapped prefix hashes, so an id also names everything before it).
	HashIDs []uint64
}

// mooncakeLine is one line as written; pointers tell a missing field from a zero.
type mooncakeLine struct {
	Timestamp    *float64 `json:"timestamp"`
	InputLength  *int64   `json:"input_length"`
	OutputLength *int64   `json:"output_length"`
	HashIDs      *[]int64 `json:"hash_ids"`
}

// maxMooncakeLength bounds input_length and output_length (10M tokens: far beyond any
// context window; it keeps a fuzzed or corrupt line from asking for gigabytes of prompt).
const maxMooncakeLength = 10_000_000

// ParseMooncakeTrace reads the Mooncake trace format: one JSON object per line with
// timestamp (ms since the trace's start, non-decreasing), input_length and output_length
// (positive token counts) and hash_ids (exactly ceil(input_length/512) non-negative ids: the
// last, partial block always has its id, as every line of the FAST'25 traces does). An id
// names a prefix, so it always sits at the same position of a prompt and appears once per
// prompt. Blank lines are skipped; unknown fields are ignored. A malformed line is an error
// naming its number and field.
func ParseMooncakeTrace(r io.Reader) ([]MooncakeRow, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	var rows []MooncakeRow
	pos := map[uint64]idPlace{} // id -> where it was first seen
	prevLine := 0
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		row, err := parseMooncakeLine(line, n, pos)
		if err != nil {
			return nil, fmt.Errorf("mooncake trace: %w", err)
		}
		if len(rows) > 0 && row.Timestamp < rows[len(rows)-1].Timestamp {
			return nil, fmt.Errorf("mooncake trace: line %d: timestamp: %v goes backwards (line %d: %v)",
				n, row.Timestamp, prevLine, rows[len(rows)-1].Timestamp)
		}
		rows = append(rows, row)
		prevLine = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("mooncake trace: after line %d: %w", prevLine, err)
	}
	if len(rows) == 0 {
		return nil, errors.New("mooncake trace: no requests")
	}
	return rows, nil
}

type idPlace struct{ line, index int }

func parseMooncakeLine(b []byte, n int, pos map[uint64]idPlace) (MooncakeRow, error) {
	var l mooncakeLine
	if err := json.Unmarshal(b, &l); err != nil {
		return MooncakeRow{}, fmt.Errorf("line %d: %w", n, err)
	}
	switch {
	case l.Timestamp == nil:
		return MooncakeRow{}, fmt.Errorf("line %d: timestamp: missing", n)
	case l.InputLength == nil:
		return MooncakeRow{}, fmt.Errorf("line %d: input_length: missing", n)
	case l.OutputLength == nil:
		return MooncakeRow{}, fmt.Errorf("line %d: output_length: missing", n)
	case l.HashIDs == nil:
		return MooncakeRow{}, fmt.Errorf("line %d: hash_ids: missing", n)
	}
	ts := *l.Timestamp
	// 1e12 ms is 31 years: past that a Duration would overflow
	if !(ts >= 0) || ts > 1e12 {
		return MooncakeRow{}, fmt.Errorf("line %d: timestamp: must be in [0, 1e12] ms, got %v", n, ts)
	}
	in, out := *l.InputLength, *l.OutputLength
	if in < 1 || in > maxMooncakeLength {
		return MooncakeRow{}, fmt.Errorf("line %d: input_length: must be in [1, %d], got %d", n, maxMooncakeLength, in)
	}
	if out < 1 || out > maxMooncakeLength {
		return MooncakeRow{}, fmt.Errorf("line %d: output_length: must be in [1, %d], got %d", n, maxMooncakeLength, out)
	}
	ids := *l.HashIDs
	want := (in + MooncakeBlockTokens - 1) / MooncakeBlockTokens
	if int64(len(ids)) != want {
		return MooncakeRow{}, fmt.Errorf("line %d: hash_ids: %d ids for input_length %d, want ceil(%d/%d) = %d",
			n, len(ids), in, in, MooncakeBlockTokens, want)
	}
	row := MooncakeRow{Timestamp: time.Duration(math.Round(ts * float64(time.Millisecond))),
		InputLength: int(in), OutputLength: int(out), HashIDs: make([]uint64, len(ids))}
	for i, id := range ids {
		if id < 0 {
			return MooncakeRow{}, fmt.Errorf("line %d: hash_ids[%d]: ids are non-negative, got %d", n, i, id)
		}
		u := uint64(id)
		if p, seen := pos[u]; seen {
			if p.line == n {
				return MooncakeRow{}, fmt.Errorf("line %d: hash_ids[%d]: id %d repeats hash_ids[%d] (an id names a prefix: once per prompt)", n, i, id, p.index)
			}
			if p.index != i {
				return MooncakeRow{}, fmt.Errorf("line %d: hash_ids[%d]: id %d was hash_ids[%d] on line %d (an id names a prefix: one position)", n, i, id, p.index, p.line)
			}
		} else {
			pos[u] = idPlace{line: n, index: i}
		}
		row.HashIDs[i] = u
	}
	return row, nil
}

// LoadMooncakeFile reads and parses a Mooncake trace file.
func LoadMooncakeFile(path string) ([]MooncakeRow, error) {
	return parseFile("mooncake trace", path, ParseMooncakeTrace)
}

// MooncakeOffsets are the rows' arrival offsets for a replay. The FAST'25 traces write
// timestamps in ~3 s buckets (1,180 distinct values for 12,031 requests, 3,000 ± 1 ms apart);
// replaying them as written would send each bucket's ~10 requests in the same millisecond.
// The rows sharing a timestamp are spread evenly, in file order, over the gap to the next
// distinct timestamp (the last bucket over the mean gap between buckets); distinct timestamps
// are kept. A trace with millisecond resolution is changed by less than a millisecond.
func MooncakeOffsets(rows []MooncakeRow) []time.Duration {
	out := make([]time.Duration, len(rows))
	var starts []int // first row of each bucket
	for i, r := range rows {
		if i == 0 || r.Timestamp != rows[i-1].Timestamp {
			starts = append(starts, i)
		}
	}
	var meanGap time.Duration
	if len(starts) > 1 {
		meanGap = (rows[len(rows)-1].Timestamp - rows[0].Timestamp) / time.Duration(len(starts)-1)
	}
	for b, s := range starts {
		end, gap := len(rows), meanGap
		if b+1 < len(starts) {
			end = starts[b+1]
			gap = rows[end].Timestamp - rows[s].Timestamp
		}
		k := end - s
		for j := 0; j < k; j++ {
			out[s+j] = rows[s].Timestamp + gap*time.Duration(j)/time.Duration(k)
		}
	}
	return out
}

// MooncakeStats summarise a Mooncake trace.
type MooncakeStats struct {
	Requests               int
	Span                   time.Duration // first to last timestamp
	MeanPrompt, MeanOutput float64
	// ReusedBlockShare is the share of all prompt blocks whose id an earlier request already
	// had (a prefix seen before: the reuse an ideal, unbounded prefix cache would find).
	ReusedBlockShare float64
	// CommonPrefixBlocks is how many leading blocks every request shares (the service's
	// system prompt: 1 block in the FAST'25 conversation trace).
	CommonPrefixBlocks int
	// FollowUps counts the follow-up turns (FollowUps below).
	FollowUps int
}

// AnalyzeMooncake returns the trace's statistics and, per row, whether it is a follow-up
// turn: a request that continues a conversation seen earlier in the trace, i.e. whose leading
// blocks seen before reach past the prefix every request shares. (Every request of the
// FAST'25 conversation trace starts with block 0, a shared system prompt, so "its first block
// was seen before" would call all but the first request a follow-up.)
func AnalyzeMooncake(rows []MooncakeRow) (MooncakeStats, []bool) {
	st := MooncakeStats{Requests: len(rows)}
	if len(rows) == 0 {
		return st, nil
	}
	st.Span = rows[len(rows)-1].Timestamp - rows[0].Timestamp
	st.CommonPrefixBlocks = len(rows[0].HashIDs)
	for _, r := range rows[1:] {
		k := 0
		for k < st.CommonPrefixBlocks && k < len(r.HashIDs) && r.HashIDs[k] == rows[0].HashIDs[k] {
			k++
		}
		st.CommonPrefixBlocks = k
	}
	seen := make(map[uint64]struct{}, len(rows)*8)
	follow := make([]bool, len(rows))
	var blocks, reused int
	for i, r := range rows {
		st.MeanPrompt += float64(r.InputLength)
		st.MeanOutput += float64(r.OutputLength)
		lead, leading := 0, true
		for _, id := range r.HashIDs {
			_, ok := seen[id]
			if ok {
				reused++
				if leading {
					lead++
				}
			} else {
				leading = false
				seen[id] = struct{}{}
			}
		}
		blocks += len(r.HashIDs)
		if lead > st.CommonPrefixBlocks {
			follow[i] = true
			st.FollowUps++
		}
	}
	st.MeanPrompt /= float64(len(rows))
	st.MeanOutput /= float64(len(rows))
	if blocks > 0 {
		st.ReusedBlockShare = float64(reused) / float64(blocks)
	}
	return st, follow
}

type mooncakeReplay struct {
	o       Options
	rows    []MooncakeRow
	offsets []time.Duration
	follow  []bool
	text    *BlockText
	i       int
}

// LoadMooncakeTrace replays a Mooncake trace once: each row becomes a streamed completion
// whose prompt is its blocks' synthesized text (BlockText: equal ids, equal text, so the
// trace's prefix reuse reaches the engines' prefix caches) with max_tokens = output_length
// (ignore_eos), sent at its spread offset (MooncakeOffsets) divided by the time scale. Kind
// is "mooncake-followup" for follow-up turns (AnalyzeMooncake), "mooncake" otherwise.
func LoadMooncakeTrace(path string, o Options) (Generator, error) {
	if path == "" {
		path = DefaultMooncakePath
	}
	rows, err := LoadMooncakeFile(path)
	if err != nil {
		return nil, fmt.Errorf("workload mooncake: %w", err)
	}
	_, follow := AnalyzeMooncake(rows)
	return &mooncakeReplay{o: o, rows: rows, offsets: MooncakeOffsets(rows), follow: follow, text: NewBlockText(0)}, nil
}

// Mooncake request kinds.
const (
	KindMooncake         = "mooncake"
	KindMooncakeFollowUp = "mooncake-followup"
)

func (m *mooncakeReplay) Next() (Request, bool) {
	if m.i >= len(m.rows) {
		return Request{}, false
	}
	i := m.i
	m.i++
	row := m.rows[i]
	body, _ := json.Marshal(map[string]any{
		"model": m.o.Model, "prompt": m.text.Prompt(row.Keys(0, nil), row.InputLength), "stream": true,
		"max_tokens": capTokens(row.OutputLength, m.o.MaxTokensCap), "ignore_eos": true,
		"stream_options": map[string]any{"include_usage": true},
	})
	kind := KindMooncake
	if m.follow[i] {
		kind = KindMooncakeFollowUp
	}
	return Request{At: time.Duration(float64(m.offsets[i]) / m.o.TimeScale), Kind: kind,
		Path: "/v1/completions", Body: body, Stream: true}, true
}

// MooncakeConversations keeps whole conversations: every row whose conversation key is a
// multiple of every (every <= 1: all rows). The key is the row's first block past the prefix
// every request shares (its last block when it has none): a follow-up turn repeats its
// conversation's blocks, so it has its first turn's key and stays with it. A short slice of
// the conversation trace sees almost no follow-ups (the median turn comes ~2 min after the
// previous one, and 120 rows span ~40 s); a slice of every 20th conversation spans ~14 min
// of the trace and keeps its multi-turn reuse.
func MooncakeConversations(rows []MooncakeRow, every int) []MooncakeRow {
	if every <= 1 || len(rows) == 0 {
		return rows
	}
	st, _ := AnalyzeMooncake(rows)
	var out []MooncakeRow
	for _, r := range rows {
		key := r.HashIDs[min(st.CommonPrefixBlocks, len(r.HashIDs)-1)]
		if key%uint64(every) == 0 {
			out = append(out, r)
		}
	}
	return out
}
