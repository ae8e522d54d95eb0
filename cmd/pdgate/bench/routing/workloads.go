package routing

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// Workload names of the bench.
const (
	WorkloadAzure = "azure-conv"
	WorkloadMixed = "mixed"
)

// Phase is one stretch of traffic at one load: its requests carry model-time offsets from
// the phase's start in At, and Kind "<phase>/<generator kind>".
type Phase struct {
	Name     string  `json:"name"`
	Workload string  `json:"workload"`
	Load     float64 `json:"load"`
	// RateRPS is the mean arrival rate in requests per model second.
	RateRPS  float64            `json:"rateRps"`
	Requests []workload.Request `json:"-"`
}

// PhaseName names a phase: "azure-conv@80%".
func PhaseName(wl string, load float64) string { return fmt.Sprintf("%s@%.0f%%", wl, load*100) }

// AzureSlice returns n consecutive rows of the trace starting at offset.
func AzureSlice(rows []workload.AzureRow, offset, n int) ([]workload.AzureRow, error) {
	return traceSlice("trace", rows, offset, n)
}

// traceSlice returns n consecutive rows starting at offset, at least 2 of them; what names the
// trace in the error.
func traceSlice[T any](what string, rows []T, offset, n int) ([]T, error) {
	if offset < 0 || n < 2 || offset+n > len(rows) {
		return nil, fmt.Errorf("%s slice [%d, %d) outside the trace's %d rows (need at least 2 rows)", what, offset, offset+n, len(rows))
	}
	return rows[offset : offset+n], nil
}

// AzureJobs are the slice's request sizes.
func AzureJobs(rows []workload.AzureRow) []Job {
	jobs := make([]Job, len(rows))
	for i, r := range rows {
		jobs[i] = Job{Prompt: r.ContextTokens, Output: r.GeneratedTokens}
	}
	return jobs
}

// AzurePhase replays a trace slice at a mean rate: inter-arrival times keep the trace's
// shape (bursts stay bursts) and are compressed or stretched so that the slice's mean rate
// is rate requests per model second. Prompts are seeded filler of the row's token count,
// output is exactly the row's generated tokens (ignore_eos).
func AzurePhase(rows []workload.AzureRow, load, rate float64, model string, seed int64) Phase {
	span := rows[len(rows)-1].Offset - rows[0].Offset
	natural := float64(len(rows)-1) / span.Seconds()
	factor := rate / natural
	rng := rand.New(rand.NewSource(seed))
	p := Phase{Name: PhaseName(WorkloadAzure, load), Workload: WorkloadAzure, Load: load, RateRPS: rate}
	for _, r := range rows {
		body, _ := json.Marshal(map[string]any{
			"model": model, "prompt": workload.Text(rng, r.ContextTokens), "stream": true,
			"max_tokens": r.GeneratedTokens, "ignore_eos": true,
			"stream_options": map[string]any{"include_usage": true},
		})
		p.Requests = append(p.Requests, workload.Request{
			At: time.Duration(float64(r.Offset-rows[0].Offset) / factor), Kind: p.Name + "/" + WorkloadAzure,
			Path: "/v1/completions", Body: body, Stream: true,
		})
	}
	return p
}

// AzurePhases replays the slice once per load, each phase with prompts of its own (seed+1,
// seed+2, ...). The phases run one after another in the same lab: replaying the same prompts
// would find them in the simulators' prefix caches and the EPP's prefix indexes, so every
// phase after the first would measure cache hits (prefix-aware policies then kept almost every
// request decode-only) instead of the trace's fresh conversations.
func AzurePhases(rows []workload.AzureRow, loads []float64, capacityRPS float64, model string, seed int64) []Phase {
	phases := make([]Phase, 0, len(loads))
	for i, l := range loads {
		phases = append(phases, AzurePhase(rows, l, l*capacityRPS, model, seed+int64(i)+1))
	}
	return phases
}

// MixedRequests draws n requests of the synthetic mix: short chat, long RAG and multi-turn
// sessions (shared, growing prefixes with x-aibrix-session-key) in turn, from the built-in
// generators of cmd/pdgate/workload.
func MixedRequests(n int, model string, seed int64) ([]workload.Request, error) {
	var gens []workload.Generator
	for i, name := range []string{"chat", "rag", "sessions"} {
		g, err := workload.New(name, workload.Options{Model: model, Seed: seed + int64(i) + 1})
		if err != nil {
			return nil, err
		}
		gens = append(gens, g)
	}
	out := make([]workload.Request, 0, n)
	for i := 0; i < n; i++ {
		r, ok := gens[i%len(gens)].Next()
		if !ok {
			return nil, fmt.Errorf("mixed workload: generator %d ended", i%len(gens))
		}
		out = append(out, r)
	}
	return out, nil
}

// MixedPhase gives the mix Poisson arrivals (seeded) at rate requests per model second.
func MixedPhase(reqs []workload.Request, load, rate float64, seed int64) Phase {
	rng := rand.New(rand.NewSource(seed))
	p := Phase{Name: PhaseName(WorkloadMixed, load), Workload: WorkloadMixed, Load: load, RateRPS: rate}
	at := 0.0
	for i, r := range reqs {
		if i > 0 {
			at += rng.ExpFloat64() / rate
		}
		r.At = time.Duration(at * float64(time.Second))
		r.Kind = p.Name + "/" + r.Kind
		p.Requests = append(p.Requests, r)
	}
	return p
}

// RequestJob sizes a request the way the simulator does (4 bytes per token; chat: role,
// "\n" and text per message, messages joined by "\n"; output: max_tokens).
func RequestJob(body []byte) (Job, error) {
	var b struct {
		Prompt    string `json:"prompt"`
		MaxTokens int    `json:"max_tokens"`
		Messages  []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return Job{}, fmt.Errorf("sizing a request: %w", err)
	}
	n := len(b.Prompt)
	if len(b.Messages) > 0 {
		parts := make([]string, 0, len(b.Messages))
		for _, m := range b.Messages {
			var text string
			if json.Unmarshal(m.Content, &text) != nil {
				var items []struct {
					Type, Text string
				}
				if err := json.Unmarshal(m.Content, &items); err != nil {
					return Job{}, fmt.Errorf("sizing a request: message content: %w", err)
				}
				for _, it := range items {
					text += it.Text
				}
			}
			parts = append(parts, m.Role+"\n"+text)
		}
		n = len(strings.Join(parts, "\n"))
	}
	return Job{Prompt: max((n+3)/4, 1), Output: max(b.MaxTokens, 1)}, nil
}

// Schedule lays phases end to end (a gap of model time after each, so queues left by one
// phase drain before the next starts) and converts the offsets to wall time at the lab's
// time scale. It returns the requests in send order and each phase's model-time start.
func Schedule(phases []Phase, gap time.Duration, timeScale float64) ([]workload.Request, []time.Duration) {
	var out []workload.Request
	starts := make([]time.Duration, len(phases))
	var t time.Duration
	for i, p := range phases {
		starts[i] = t
		var last time.Duration
		for _, r := range p.Requests {
			last = r.At
			r.At = time.Duration(float64(t+r.At) / timeScale)
			out = append(out, r)
		}
		t += last + gap
	}
	return out, starts
}

// WorkloadMooncake is the Mooncake conversation trace's phase (--mooncake).
const WorkloadMooncake = "mooncake"

// MooncakeSlice returns n consecutive rows of a Mooncake trace starting at offset.
func MooncakeSlice(rows []workload.MooncakeRow, offset, n int) ([]workload.MooncakeRow, error) {
	return traceSlice("mooncake", rows, offset, n)
}

// MooncakeJobs are the slice's request sizes.
func MooncakeJobs(rows []workload.MooncakeRow) []Job {
	jobs := make([]Job, len(rows))
	for i, r := range rows {
		jobs[i] = Job{Prompt: r.InputLength, Output: r.OutputLength}
	}
	return jobs
}

// MooncakePhase replays a Mooncake trace slice at a mean rate like AzurePhase: the trace's
// arrival shape (its ~3 s timestamp buckets spread, workload.MooncakeOffsets) compressed or
// stretched to rate requests per model second. Prompts are the blocks' synthesized text
// (workload.BlockText: equal hash ids, equal text), so the slice's multi-turn prefix reuse
// reaches the simulators' prefix caches; output is exactly output_length (ignore_eos). Kinds
// are "<phase>/mooncake", or "<phase>/mooncake-followup" for follow-up turns within the slice.
func MooncakePhase(rows []workload.MooncakeRow, load, rate float64, model string) Phase {
	offsets := workload.MooncakeOffsets(rows)
	_, follow := workload.AnalyzeMooncake(rows)
	p := Phase{Name: PhaseName(WorkloadMooncake, load), Workload: WorkloadMooncake, Load: load, RateRPS: rate}
	span := offsets[len(offsets)-1] - offsets[0]
	factor := 1.0
	if span > 0 {
		factor = rate / (float64(len(rows)-1) / span.Seconds())
	}
	text := workload.NewBlockText(0)
	for i, r := range rows {
		body, _ := json.Marshal(map[string]any{
			"model": model, "prompt": text.Prompt(r.Keys(0, nil), r.InputLength), "stream": true,
			"max_tokens": r.OutputLength, "ignore_eos": true,
			"stream_options": map[string]any{"include_usage": true},
		})
		kind := workload.KindMooncake
		if follow[i] {
			kind = workload.KindMooncakeFollowUp
		}
		p.Requests = append(p.Requests, workload.Request{
			At: time.Duration(float64(offsets[i]-offsets[0]) / factor), Kind: p.Name + "/" + kind,
			Path: "/v1/completions", Body: body, Stream: true,
		})
	}
	return p
}

// prepareMooncake reads the --mooncake slice, derives the fleets' capacity for it and builds
// its phase at --mooncake-load.
func prepareMooncake(o Options, res *Results, prof *costmodel.Profile, model string, nP, nD, nComb int) (Phase, error) {
	rows, err := workload.LoadMooncakeFile(o.Mooncake)
	if err != nil {
		return Phase{}, fmt.Errorf("--mooncake: %w", err)
	}
	slice, err := MooncakeSlice(workload.MooncakeConversations(rows, o.MooncakeEvery), o.MooncakeOffset, o.MooncakeRequests)
	if err != nil {
		return Phase{}, fmt.Errorf("--mooncake-offset/--mooncake-requests: %w", err)
	}
	res.MooncakeSlice = [2]int{o.MooncakeOffset, o.MooncakeOffset + o.MooncakeRequests}
	if res.MooncakeCapacity, err = FleetCapacity(prof, MooncakeJobs(slice), nP, nD, nComb); err != nil {
		return Phase{}, fmt.Errorf("mooncake capacity: %w", err)
	}
	return MooncakePhase(slice, o.MooncakeLoad, o.MooncakeLoad*res.MooncakeCapacity.PDRPS, model), nil
}
