package simbench

import (
	"fmt"
	"math"
	"math/rand"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// The synthetic mixes of the shifting workload (workload.Code, workload.Reasoning).
const (
	WorkloadCode      = "code"
	WorkloadReasoning = "reasoning"
)

// DefaultShiftPhases is the shifting workload's order: chat, then prefill-heavy code, then
// decode-heavy reasoning, then long-context multi-turn chat with prefix reuse.
var DefaultShiftPhases = []string{WorkloadAzure, WorkloadCode, WorkloadReasoning, WorkloadMooncake}

// ShiftPhase is one phase of the shifting workload.
type ShiftPhase struct {
	Workload   string  `json:"workload"`
	MeanPrompt float64 `json:"meanPrompt"`
	MeanOutput float64 `json:"meanOutput"`
	// CapacityPerGPU is the phase's capacity estimate (CapacityPerGPU); a run at load L
	// offers L × this × GPUs requests per second while the phase lasts.
	CapacityPerGPU float64 `json:"capacityPerGpu"`
}

// NewShiftPhases samples each named workload's mean request and capacity estimate.
func NewShiftPhases(names []string, traces Traces, prof *costmodel.Profile, seed int64) ([]ShiftPhase, error) {
	out := make([]ShiftPhase, 0, len(names))
	for _, name := range names {
		ph := ShiftPhase{Workload: name}
		switch name {
		case WorkloadCode:
			ph.MeanPrompt, ph.MeanOutput = workload.Code.Means()
		case WorkloadReasoning:
			ph.MeanPrompt, ph.MeanOutput = workload.Reasoning.Means()
		default:
			st, err := SampleWorkload(name, traces, seed, 2000, prof.BlockSize)
			if err != nil {
				return nil, fmt.Errorf("shifting workload: %w", err)
			}
			ph.MeanPrompt, ph.MeanOutput = st.MeanPrompt, st.MeanOutput
		}
		ph.CapacityPerGPU = CapacityPerGPU(prof, ph.MeanPrompt, ph.MeanOutput)
		out = append(out, ph)
	}
	return out, nil
}

// LoadTraces reads the traces the named workloads replay (each once); errors name the flag.
func LoadTraces(workloads []string, azure, mooncake string) (Traces, error) {
	var t Traces
	var err error
	for _, name := range workloads {
		switch {
		case name == WorkloadAzure && t.Azure == nil:
			if t.Azure, err = workload.LoadAzureFile(azure); err != nil {
				return t, fmt.Errorf("--azure-conv: %w", err)
			}
		case name == WorkloadMooncake && t.Mooncake == nil:
			if t.Mooncake, err = workload.LoadMooncakeFile(mooncake); err != nil {
				return t, fmt.Errorf("--mooncake: %w", err)
			}
		}
	}
	return t, nil
}

// MeanCapacityPerGPU is the capacity averaged over the phases (they last equally long): a run
// at load L offers L × this requests per second per GPU on average.
func MeanCapacityPerGPU(phases []ShiftPhase) float64 {
	var sum float64
	for _, p := range phases {
		sum += p.CapacityPerGPU
	}
	return sum / float64(max(len(phases), 1))
}

// shiftingSource plays its phases in turn, each for `every` of virtual time, at its own rate.
type shiftingSource struct {
	srcs  []Source
	every time.Duration
	i     int
}

// NewShiftingSource is the shifting workload at load (a fraction of each phase's capacity)
// on gpus GPUs, every phase lasting every.
func NewShiftingSource(phases []ShiftPhase, traces Traces, load float64, gpus int, every time.Duration, seed int64) (Source, error) {
	s := &shiftingSource{every: every}
	for i, ph := range phases {
		rate := load * ph.CapacityPerGPU * float64(gpus)
		// enough requests for the phase however bursty the trace; the phase ends on time
		n := int(math.Ceil(rate*every.Seconds()*2)) + 100
		src, err := phaseSource(ph.Workload, traces, rate, seed+int64(i), n)
		if err != nil {
			return nil, err
		}
		s.srcs = append(s.srcs, src)
	}
	return s, nil
}

func (s *shiftingSource) Next() (Arrival, bool) {
	for s.i < len(s.srcs) {
		if a, ok := s.srcs[s.i].Next(); ok && a.At < s.every {
			a.At += time.Duration(s.i) * s.every
			return a, true
		}
		s.i++
	}
	return Arrival{}, false
}

// phaseSource is one phase's workload at rate req/s, at most n requests.
func phaseSource(name string, traces Traces, rate float64, seed int64, n int) (Source, error) {
	switch name {
	case WorkloadCode:
		return newMixSource(workload.Code, rate, seed, n), nil
	case WorkloadReasoning:
		return newMixSource(workload.Reasoning, rate, seed, n), nil
	}
	return NewWorkloadSource(name, traces, rate, seed, n)
}

// mixSource is a workload.Mix arriving as a Poisson process; prompts are seeded filler sent
// as a completions prompt, as the Azure replay sends them.
type mixSource struct {
	m      workload.Mix
	rate   float64
	rng    *rand.Rand
	t      time.Duration
	max, n int
}

func newMixSource(m workload.Mix, rate float64, seed int64, n int) *mixSource {
	return &mixSource{m: m, rate: rate, rng: rand.New(rand.NewSource(seed)), max: n}
}

func (s *mixSource) Next() (Arrival, bool) {
	if s.n >= s.max || !(s.rate > 0) {
		return Arrival{}, false
	}
	s.n++
	s.t += time.Duration(s.rng.ExpFloat64() / s.rate * float64(time.Second))
	prompt, out := s.m.Sample(s.rng)
	text := workload.Text(s.rng, prompt)
	return Arrival{At: s.t, Kind: s.m.Kind, Bytes: len(text) + 120, Output: out,
		Body:   &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: text}}},
		Tokens: tokensOf(make([]uint32, 0, prompt), []byte(text))}, true
}
