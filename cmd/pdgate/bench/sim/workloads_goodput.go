package simbench

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand"
	"slices"
	"strings"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/kvcache"
)

// Goodput workloads: the Azure conversation trace as is (no prefix reuse), multi-turn
// sessions over shared system prompts (heavy reuse), long-context RAG (long prompts, partial
// reuse), the Mooncake conversation trace (real long-context multi-turn reuse). Every
// generator is seeded or deterministic; the parameters are documented in the README.
const (
	WorkloadAzure    = "azure-conv"
	WorkloadSessions = "sessions"
	WorkloadRAG      = "rag"
)

// SessionsParams shape the multi-turn workload.
type SessionsParams struct {
	SystemPrompts      int           // distinct shared system prompts, picked uniformly
	SystemTokens       int           // tokens of each system prompt
	TurnsMin, TurnsMax int           // turns per conversation, uniform
	UserMin, UserMax   int           // tokens of each user message, uniform
	OutMin, OutMax     int           // output tokens per turn, uniform (the reply joins the history)
	Think              time.Duration // mean (exponential) time between two turns of a conversation
}

// DefaultSessions: 16 system prompts of 1,000 tokens, 2–12 turns, 30–300-token user
// messages, 32–384 output tokens, 2 s mean think time (compressed from real chat's tens of
// seconds so that a run of a few thousand requests sees many turns of each conversation).
var DefaultSessions = SessionsParams{SystemPrompts: 16, SystemTokens: 1000, TurnsMin: 2, TurnsMax: 12,
	UserMin: 30, UserMax: 300, OutMin: 32, OutMax: 384, Think: 2 * time.Second}

// RAGParams shape the long-context RAG workload.
type RAGParams struct {
	Docs                  int     // corpus size
	DocMin, DocMax        int     // tokens per document, uniform
	PerRequest            int     // documents retrieved per request, in rank order
	Zipf                  float64 // document popularity exponent (s > 1)
	SystemTokens          int     // one shared system prompt
	QuestionMin, QuestMax int     // question tokens, uniform
	OutMin, OutMax        int     // output tokens, uniform
}

// DefaultRAG: 500 documents of 1,000–4,000 tokens, 3 per request by Zipf(1.2) popularity,
// a 300-token system prompt, 20–100-token questions, 16–256 output tokens (prompts of about
// 4k–12k tokens; reuse where the top-ranked document repeats).
var DefaultRAG = RAGParams{Docs: 500, DocMin: 1000, DocMax: 4000, PerRequest: 3, Zipf: 1.2, SystemTokens: 300,
	QuestionMin: 20, QuestMax: 100, OutMin: 16, OutMax: 256}

// NewWorkloadSource returns the named goodput workload at a mean rate of rate req/s.
func NewWorkloadSource(name string, traces Traces, rate float64, seed int64, n int) (Source, error) {
	switch name {
	case WorkloadAzure:
		return NewAzureSource(traces.Azure, rate, seed, n, 0)
	case WorkloadMooncake:
		return NewMooncakeSource(traces.Mooncake, rate, n)
	case WorkloadSessions:
		return NewSessionsSource(DefaultSessions, rate, seed, n)
	case WorkloadRAG:
		return NewRAGSource(DefaultRAG, rate, seed, n)
	}
	return nil, fmt.Errorf("workload %q: want %s, %s, %s or %s", name, WorkloadAzure, WorkloadSessions, WorkloadRAG, WorkloadMooncake)
}

// chatArrival builds an arrival from chat messages, tokenized as decodeRequest tokenizes a
// chat body (role and content per message, newline-joined), so prefix hits match the lab.
func chatArrival(kind string, msgs []fwksched.Message, output int, headers map[string]string) Arrival {
	var b strings.Builder
	for i, m := range msgs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(m.Role + "\n" + m.Content.Raw)
	}
	text := b.String()
	return Arrival{Kind: kind, Headers: headers, Bytes: len(text) + 40*len(msgs) + 120, Output: output,
		Body:   &fwksched.LLMRequestBody{ChatCompletions: &fwksched.ChatCompletionsRequest{Messages: slices.Clone(msgs)}},
		Tokens: tokensOf(make([]uint32, 0, len(text)/4+1), []byte(text))}
}

func uniform(rng *rand.Rand, lo, hi int) int { return lo + rng.Intn(hi-lo+1) }

// sessionsSource keeps a steady population of conversations (Little's law: rate × think),
// each waiting an exponential think time between turns; a finished conversation is replaced
// by a new one, so the rate holds from the first second. Conversations start at a random
// turn with a history already written (a fleet joined mid-day: no pod has it cached).
type sessionsSource struct {
	p      SessionsParams
	rng    *rand.Rand
	system []string
	q      convQueue
	max, n int
	nextID int
}

type conv struct {
	at    time.Duration
	id    int
	msgs  []fwksched.Message
	turn  int
	turns int
}

type convQueue []*conv

func (q convQueue) Len() int { return len(q) }
func (q convQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].id < q[j].id
}
func (q convQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *convQueue) Push(x any)   { *q = append(*q, x.(*conv)) }
func (q *convQueue) Pop() any {
	old := *q
	c := old[len(old)-1]
	*q = old[:len(old)-1]
	return c
}

// NewSessionsSource yields n turns at a mean rate of rate req/s.
func NewSessionsSource(p SessionsParams, rate float64, seed int64, n int) (Source, error) {
	if !(rate > 0) || p.SystemPrompts < 1 || p.TurnsMin < 1 || p.TurnsMax < p.TurnsMin || p.Think <= 0 {
		return nil, fmt.Errorf("sessions workload: bad parameters (rate %v, %+v)", rate, p)
	}
	s := &sessionsSource{p: p, rng: rand.New(rand.NewSource(seed)), max: n}
	for range p.SystemPrompts {
		s.system = append(s.system, workload.Text(s.rng, p.SystemTokens))
	}
	live := max(1, int(math.Round(rate*p.Think.Seconds())))
	for range live {
		c := s.newConv(0)
		// join mid-conversation: replay the earlier turns into the history
		for c.turn = 0; c.turn < s.rng.Intn(c.turns); c.turn++ {
			s.addTurn(c)
		}
		heap.Push(&s.q, c)
	}
	return s, nil
}

func (s *sessionsSource) think() time.Duration {
	return time.Duration(s.rng.ExpFloat64() * float64(s.p.Think))
}

func (s *sessionsSource) newConv(now time.Duration) *conv {
	s.nextID++
	c := &conv{id: s.nextID, turns: uniform(s.rng, s.p.TurnsMin, s.p.TurnsMax), at: now + s.think()}
	c.msgs = []fwksched.Message{{Role: "system", Content: fwksched.Content{Raw: s.system[s.rng.Intn(len(s.system))]}}}
	return c
}

// addTurn appends a user message and its reply (a stand-in of the output's length: the
// simulator's text is not known here) and returns the request's messages and output.
func (s *sessionsSource) addTurn(c *conv) ([]fwksched.Message, int) {
	c.msgs = append(c.msgs, fwksched.Message{Role: "user", Content: fwksched.Content{Raw: workload.Text(s.rng, uniform(s.rng, s.p.UserMin, s.p.UserMax))}})
	req := c.msgs
	out := uniform(s.rng, s.p.OutMin, s.p.OutMax)
	c.msgs = append(c.msgs[:len(c.msgs):len(c.msgs)], fwksched.Message{Role: "assistant", Content: fwksched.Content{Raw: workload.Text(s.rng, out)}})
	return req, out
}

func (s *sessionsSource) Next() (Arrival, bool) {
	if s.n >= s.max || s.q.Len() == 0 {
		return Arrival{}, false
	}
	s.n++
	c := heap.Pop(&s.q).(*conv)
	msgs, out := s.addTurn(c)
	a := chatArrival(WorkloadSessions, msgs, out, map[string]string{"x-aibrix-session-key": fmt.Sprintf("conv-%d", c.id)})
	a.At = c.at
	c.turn++
	if c.turn >= c.turns {
		c = s.newConv(a.At)
	} else {
		c.at = a.At + s.think()
	}
	heap.Push(&s.q, c)
	return a, true
}

// ragSource makes independent long-context requests at Poisson arrivals.
type ragSource struct {
	p      RAGParams
	rng    *rand.Rand
	docs   []string
	zipf   *rand.Zipf
	system string
	rate   float64
	t      time.Duration
	max, n int
}

// NewRAGSource yields n requests at a mean rate of rate req/s.
func NewRAGSource(p RAGParams, rate float64, seed int64, n int) (Source, error) {
	if !(rate > 0) || p.Docs < p.PerRequest || p.PerRequest < 1 || !(p.Zipf > 1) || p.DocMin < 1 || p.DocMax < p.DocMin {
		return nil, fmt.Errorf("rag workload: bad parameters (rate %v, %+v)", rate, p)
	}
	rng := rand.New(rand.NewSource(seed))
	s := &ragSource{p: p, rng: rng, rate: rate, max: n, system: workload.Text(rng, p.SystemTokens)}
	for range p.Docs {
		s.docs = append(s.docs, workload.Text(rng, uniform(rng, p.DocMin, p.DocMax)))
	}
	s.zipf = rand.NewZipf(rng, p.Zipf, 1, uint64(p.Docs-1))
	return s, nil
}

func (s *ragSource) Next() (Arrival, bool) {
	if s.n >= s.max {
		return Arrival{}, false
	}
	s.n++
	s.t += time.Duration(s.rng.ExpFloat64() / s.rate * float64(time.Second))
	var picked []uint64
	for len(picked) < s.p.PerRequest {
		d := s.zipf.Uint64()
		if !slices.Contains(picked, d) {
			picked = append(picked, d)
		}
	}
	var user strings.Builder
	for _, d := range picked {
		user.WriteString(s.docs[d])
		user.WriteByte('\n')
	}
	user.WriteString(workload.Text(s.rng, uniform(s.rng, s.p.QuestionMin, s.p.QuestMax)))
	msgs := []fwksched.Message{{Role: "system", Content: fwksched.Content{Raw: s.system}}, {Role: "user", Content: fwksched.Content{Raw: user.String()}}}
	a := chatArrival(WorkloadRAG, msgs, uniform(s.rng, s.p.OutMin, s.p.OutMax), nil)
	a.At = s.t
	return a, true
}

// WorkloadStats are a workload's prompt and output sizes over a sample (SLO derivation and
// the capacity estimate that sets the rate sweep's scale).
type WorkloadStats struct {
	MedianPrompt, MeanPrompt, MeanOutput float64
	// MeanReuse is the share of prompt tokens whose 16-token blocks an earlier request of the
	// sample already had (an upper bound on prefix-cache hits).
	MeanReuse float64
}

// SampleWorkload draws n requests of the workload and summarises them.
func SampleWorkload(name string, traces Traces, seed int64, n, blockSize int) (WorkloadStats, error) {
	src, err := NewWorkloadSource(name, traces, 100, seed, n)
	if err != nil {
		return WorkloadStats{}, err
	}
	var prompts []float64
	var st WorkloadStats
	seen := map[uint64]bool{}
	var reused, total float64
	for {
		a, ok := src.Next()
		if !ok {
			break
		}
		prompts = append(prompts, float64(len(a.Tokens)))
		st.MeanPrompt += float64(len(a.Tokens))
		st.MeanOutput += float64(a.Output)
		// chained block hashes: a block counts as reused when an earlier request had the
		// same prefix up to and including it
		for _, h := range kvcache.BlockHashes(a.Tokens, blockSize) {
			if seen[h] {
				reused += float64(blockSize)
			}
			seen[h] = true
		}
		total += float64(len(a.Tokens))
	}
	if len(prompts) == 0 {
		return st, fmt.Errorf("workload %s: empty sample", name)
	}
	slices.Sort(prompts)
	st.MedianPrompt = prompts[len(prompts)/2]
	st.MeanPrompt /= float64(len(prompts))
	st.MeanOutput /= float64(len(prompts))
	if total > 0 {
		st.MeanReuse = reused / total
	}
	return st, nil
}
