package simbench

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/plugins/wire/bytetokens"
)

// Arrival is one request of the simulated workload.
type Arrival struct {
	At      time.Duration // since the start of the run
	Kind    string
	Body    *fwksched.LLMRequestBody
	Headers map[string]string
	Bytes   int      // request body size
	Tokens  []uint32 // the simulator's tokenization of the prompt
	Output  int      // tokens the simulator generates (max_tokens)
	// Turn is a conversation turn's kind, for traces that know it (TTFT per kind).
	Turn Turn
}

// Source yields arrivals in time order; ok=false ends the workload.
type Source interface {
	Next() (Arrival, bool)
}

// tokensOf is the simulator's tokenizer (plugins/wire/bytetokens: 4 bytes per token, zero-padded,
// the one the EPP's estimate uses), so prefix-cache hits match what the lab's simulators
// compute and the keys the EPP computes match the blocks the engines cache.
func tokensOf(dst []uint32, b []byte) []uint32 { return bytetokens.Tokenize(dst, b) }

// genSource adapts a cmd/pdgate/workload generator: bodies decoded as the simulator decodes
// them; requests without a trace offset arrive as a Poisson process at rate req/s.
type genSource struct {
	gen  workload.Generator
	rate float64
	rng  *rand.Rand
	t    time.Duration
	max  int
	n    int
}

// NewGeneratorSource yields at most max requests of gen.
func NewGeneratorSource(gen workload.Generator, rate float64, seed int64, max int) Source {
	return &genSource{gen: gen, rate: rate, rng: rand.New(rand.NewSource(seed)), max: max}
}

func (g *genSource) Next() (Arrival, bool) {
	if g.n >= g.max {
		return Arrival{}, false
	}
	w, ok := g.gen.Next()
	if !ok {
		return Arrival{}, false
	}
	g.n++
	a, err := decodeRequest(w)
	if err != nil {
		// The built-in generators only make well-formed bodies; a JSONL file may not.
		panic(fmt.Sprintf("workload request %d: %v", g.n, err))
	}
	switch {
	case w.At > 0 || (g.rate <= 0 && g.n == 1):
		a.At = w.At
	case g.rate > 0:
		g.t += time.Duration(g.rng.ExpFloat64() / g.rate * float64(time.Second))
		a.At = g.t
	}
	return a, true
}

type wireBody struct {
	Prompt    *string       `json:"prompt"`
	Messages  []wireMessage `json:"messages"`
	MaxTokens *int          `json:"max_tokens"`
}

type wireMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

func decodeRequest(w workload.Request) (Arrival, error) {
	var b wireBody
	if err := json.Unmarshal(w.Body, &b); err != nil {
		return Arrival{}, fmt.Errorf("body: %w", err)
	}
	a := Arrival{Kind: w.Kind, Headers: w.Headers, Bytes: len(w.Body), Output: 128}
	if b.MaxTokens != nil {
		a.Output = *b.MaxTokens
	}
	switch {
	case b.Prompt != nil:
		a.Body = &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: *b.Prompt}}}
		a.Tokens = tokensOf(nil, []byte(*b.Prompt))
	case len(b.Messages) > 0:
		var pk bytetokens.Packer
		msgs := make([]fwksched.Message, 0, len(b.Messages))
		for i, m := range b.Messages {
			var s string
			if err := json.Unmarshal(m.Content, &s); err != nil {
				// content parts: the text parts count (multimodal items are not modelled)
				var parts []struct{ Type, Text string }
				if err := json.Unmarshal(m.Content, &parts); err != nil {
					return Arrival{}, fmt.Errorf("messages[%d].content: %w", i, err)
				}
				for _, p := range parts {
					s += p.Text
				}
			}
			pk.ChatMessage(m.Role, s) // the simulator's chat template
			msgs = append(msgs, fwksched.Message{Role: m.Role, Content: fwksched.Content{Raw: s}})
		}
		a.Body = &fwksched.LLMRequestBody{ChatCompletions: &fwksched.ChatCompletionsRequest{Messages: msgs}}
		pk.Flush()
		a.Tokens = pk.Tokens
	default:
		return Arrival{}, fmt.Errorf("body has neither prompt nor messages")
	}
	if len(a.Tokens) == 0 {
		return Arrival{}, fmt.Errorf("empty prompt")
	}
	return a, nil
}

// azureSource replays the Azure conversation trace at scale: the trace is tiled (pass k
// starts where pass k-1 ended) and its timestamps compressed so that the mean arrival rate is
// rate req/s; burstiness and the token-length mix are the trace's. Prompts are seeded filler
// like the lab's replay.
type azureSource struct {
	replay
	rows []workload.AzureRow
	rng  *rand.Rand
	cap  int
}

// replay tiles a trace of rows requests, max requests in all, and scales its timestamps to a
// mean rate.
type replay struct {
	rows   int
	span   time.Duration // one pass of the trace
	factor float64       // virtual seconds per trace second
	max, n int
}

// newReplay checks the trace (named in errors) and the rate; last is the offset of the
// trace's last request.
func newReplay(trace string, rows int, last time.Duration, rate float64, max int) (replay, error) {
	if rows < 2 {
		return replay{}, fmt.Errorf("%s trace: need at least 2 rows, got %d", trace, rows)
	}
	if !(rate > 0) {
		return replay{}, fmt.Errorf("%s replay: rate must be > 0, got %v", trace, rate)
	}
	// a pass lasts the trace plus one mean gap, so passes join without a burst
	span := last + last/time.Duration(rows-1)
	return replay{rows: rows, span: span, factor: float64(rows) / span.Seconds() / rate, max: max}, nil
}

// next is the trace row of the next request and its pass; false once max are out.
func (r *replay) next() (i, pass int, ok bool) {
	if r.n >= r.max {
		return 0, 0, false
	}
	pass, i = r.n/r.rows, r.n%r.rows
	r.n++
	return i, pass, true
}

// at is the arrival time of a request offset into its pass.
func (r *replay) at(pass int, offset time.Duration) time.Duration {
	return time.Duration(float64(time.Duration(pass)*r.span+offset) * r.factor)
}

// NewAzureSource replays rows at a mean rate of rate req/s, max requests in all.
func NewAzureSource(rows []workload.AzureRow, rate float64, seed int64, max, maxTokensCap int) (Source, error) {
	var last time.Duration
	if len(rows) > 0 {
		last = rows[len(rows)-1].Offset
	}
	r, err := newReplay("azure", len(rows), last, rate, max)
	if err != nil {
		return nil, err
	}
	return &azureSource{replay: r, rows: rows, rng: rand.New(rand.NewSource(seed)), cap: maxTokensCap}, nil
}

func (s *azureSource) Next() (Arrival, bool) {
	i, pass, ok := s.next()
	if !ok {
		return Arrival{}, false
	}
	row := s.rows[i]
	at := s.at(pass, row.Offset)
	text := workload.Text(s.rng, row.ContextTokens)
	out := row.GeneratedTokens
	if s.cap > 0 && out > s.cap {
		out = s.cap
	}
	return Arrival{At: at, Kind: "azure-conv", Bytes: len(text) + 120, Output: out,
		Body:   &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: text}}},
		Tokens: tokensOf(make([]uint32, 0, row.ContextTokens), []byte(text))}, true
}

// azureMeans are the trace's mean prompt and output tokens (capacity estimate).
func azureMeans(rows []workload.AzureRow) (prompt, output float64) {
	for _, r := range rows {
		prompt += float64(r.ContextTokens)
		output += float64(r.GeneratedTokens)
	}
	return prompt / float64(len(rows)), output / float64(len(rows))
}
