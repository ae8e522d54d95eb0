package simbench

import (
	"fmt"
	"strings"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/cmd/pdgate/workload"
)

// Workload names of the traces `--trace NAME=FILE` replays.
const (
	WorkloadMooncake = "mooncake"
)

// Turn tells first turns of a conversation from follow-ups (traces that know: Mooncake).
type Turn int

// Turn kinds.
const (
	TurnUnknown Turn = iota
	TurnFirst
	TurnFollowUp
)

// Traces are the parsed traces a workload may replay.
type Traces struct {
	Azure    []workload.AzureRow
	Mooncake []workload.MooncakeRow
}

// TraceSpec is `--trace NAME=FILE`.
type TraceSpec struct {
	Name, File string
}

// ParseTraceSpec reads NAME=FILE; NAME is mooncake or azure-conv.
func ParseTraceSpec(s string) (TraceSpec, error) {
	name, file, ok := strings.Cut(s, "=")
	name, file = strings.TrimSpace(name), strings.TrimSpace(file)
	if !ok || file == "" {
		return TraceSpec{}, fmt.Errorf("--trace %q: want NAME=FILE (mooncake=conversation_trace.jsonl or azure-conv=conv.csv)", s)
	}
	if name != WorkloadMooncake && name != WorkloadAzure {
		return TraceSpec{}, fmt.Errorf("--trace %q: trace %q unknown, want %s or %s", s, name, WorkloadMooncake, WorkloadAzure)
	}
	return TraceSpec{Name: name, File: file}, nil
}

// TraceInfo describes the replayed trace in sim.json.
type TraceInfo struct {
	Name       string  `json:"name"`
	File       string  `json:"file"`
	Requests   int     `json:"requests"`
	MeanPrompt float64 `json:"meanPrompt"`
	MeanOutput float64 `json:"meanOutput"`
	// ReusedBlockShare and FollowUps: workload.AnalyzeMooncake (Mooncake traces only).
	ReusedBlockShare float64 `json:"reusedBlockShare,omitempty"`
	FollowUps        int     `json:"followUps,omitempty"`
}

// mooncakeSource replays a Mooncake trace at scale like azureSource replays the Azure trace:
// tiled (pass k starts where pass k−1 ended) and time-compressed to a mean rate of rate req/s,
// with the trace's bucketed timestamps spread (workload.MooncakeOffsets). Prompts are the
// blocks' synthesized text (workload.BlockText), so the trace's prefix reuse reaches the
// engines' prefix caches and the EPP's prefix scorers. Pass k > 0 salts every block id with
// k except those of the prefix every request shares (the service's system prompt): a later
// pass is new conversations, not a replay of cached ones.
type mooncakeSource struct {
	replay
	rows    []workload.MooncakeRow
	offsets []time.Duration
	follow  []bool
	keep    map[uint64]bool
	text    *workload.BlockText
}

// NewMooncakeSource replays rows at a mean rate of rate req/s, max requests in all.
func NewMooncakeSource(rows []workload.MooncakeRow, rate float64, max int) (Source, error) {
	var offsets []time.Duration
	var last time.Duration
	if len(rows) >= 2 {
		offsets = workload.MooncakeOffsets(rows)
		last = offsets[len(offsets)-1]
	}
	r, err := newReplay("mooncake", len(rows), last, rate, max)
	if err != nil {
		return nil, err
	}
	if r.span <= 0 {
		return nil, fmt.Errorf("mooncake trace: all %d rows at one instant: no rate to scale", len(rows))
	}
	st, follow := workload.AnalyzeMooncake(rows)
	keep := map[uint64]bool{}
	for _, id := range rows[0].HashIDs[:st.CommonPrefixBlocks] {
		keep[id] = true
	}
	return &mooncakeSource{replay: r, rows: rows, offsets: offsets, follow: follow, keep: keep,
		text: workload.NewBlockText(0)}, nil
}

func (s *mooncakeSource) Next() (Arrival, bool) {
	i, pass, ok := s.next()
	if !ok {
		return Arrival{}, false
	}
	row := s.rows[i]
	at := s.at(pass, s.offsets[i])
	text := s.text.Prompt(row.Keys(uint64(pass), s.keep), row.InputLength)
	turn := TurnFirst
	if s.follow[i] {
		turn = TurnFollowUp
	}
	return Arrival{At: at, Kind: WorkloadMooncake, Turn: turn, Bytes: len(text) + 120, Output: row.OutputLength,
		Body:   &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: text}}},
		Tokens: tokensOf(make([]uint32, 0, row.InputLength), []byte(text))}, true
}

// mooncakeInfo summarises the trace for the capacity estimate and sim.json.
func mooncakeInfo(file string, rows []workload.MooncakeRow) TraceInfo {
	st, _ := workload.AnalyzeMooncake(rows)
	return TraceInfo{Name: WorkloadMooncake, File: file, Requests: st.Requests, MeanPrompt: st.MeanPrompt,
		MeanOutput: st.MeanOutput, ReusedBlockShare: st.ReusedBlockShare, FollowUps: st.FollowUps}
}

// workloadSource is the run's workload: the Azure rows already read (the calibration's trace),
// or the trace --trace names. newSource makes a fresh replay at a mean rate (one per run).
func (o Options) workloadSource(azure []workload.AzureRow) (newSource func(rate float64) (Source, error), info TraceInfo, err error) {
	spec := TraceSpec{Name: WorkloadAzure, File: o.Azure}
	if o.Trace != "" {
		if spec, err = ParseTraceSpec(o.Trace); err != nil {
			return nil, info, err
		}
	}
	path := o.path(spec.File)
	switch spec.Name {
	case WorkloadMooncake:
		rows, err := workload.LoadMooncakeFile(path)
		if err != nil {
			return nil, info, fmt.Errorf("--trace: %w", err)
		}
		info = mooncakeInfo(spec.File, rows)
		return func(rate float64) (Source, error) { return NewMooncakeSource(rows, rate, o.Requests) }, info, nil
	default:
		rows := azure
		if o.Trace != "" {
			if rows, err = workload.LoadAzureFile(path); err != nil {
				return nil, info, fmt.Errorf("--trace: %w", err)
			}
		}
		mp, mo := azureMeans(rows)
		info = TraceInfo{Name: WorkloadAzure, File: spec.File, Requests: len(rows), MeanPrompt: mp, MeanOutput: mo}
		return func(rate float64) (Source, error) { return NewAzureSource(rows, rate, o.Seed, o.Requests, 0) }, info, nil
	}
}
