// Package workload generates the request streams `pdgate lab` and `pdgate bench` drive
// through a gateway: synthetic chat, RAG, multi-turn sessions, multimodal and mixed
// traffic, replays of the Azure LLM inference conversation trace and of a Mooncake trace
// (with its prefix structure), the conditional-decode coordinator, or a JSONL file.
package workload

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"time"
)

// Request is one request to send.
type Request struct {
	// At is the offset from the run's start at which to send (trace replays); zero means
	// "as soon as the rate and concurrency allow".
	At time.Duration `json:"-"`
	// Kind names the generator that made it (chat, rag, ...).
	Kind string `json:"kind"`
	// Path is the OpenAI API path.
	Path string `json:"path"`
	// Headers are extra request headers.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the JSON body.
	Body json.RawMessage `json:"body"`
	// Stream reports whether the body asks for SSE.
	Stream bool `json:"stream"`
	// Conditional asks the driver to send `Prefer: if-available` first and run the full
	// pipeline after a 412 (the conditional-decode coordinator).
	Conditional bool `json:"conditional,omitempty"`
}

// Generator yields requests; ok=false ends the workload.
type Generator interface {
	Next() (Request, bool)
}

// Names lists the built-in workloads.
var Names = []string{"chat", "rag", "sessions", "multimodal", "mixed", "azure-conv", "mooncake", "conditional"}

// Options parameterise the built-in workloads.
type Options struct {
	Model string
	Seed  int64
	// AzureConvPath is the Azure conversation trace CSV (azure-conv).
	AzureConvPath string
	// MooncakePath is the Mooncake trace JSONL (mooncake; "" = DefaultMooncakePath).
	MooncakePath string
	// TimeScale compresses trace timestamps: 10 replays ten times faster.
	TimeScale float64
	// MaxTokensCap bounds generated tokens (0 = no cap).
	MaxTokensCap int
}

// New returns a generator for a built-in workload name or a JSONL file path.
func New(name string, o Options) (Generator, error) {
	if o.Model == "" {
		o.Model = "meta-llama/Llama-3.1-8B-Instruct"
	}
	if o.TimeScale <= 0 {
		o.TimeScale = 1
	}
	rng := rand.New(rand.NewSource(o.Seed))
	switch name {
	case "chat":
		return &synthetic{o: o, rng: rng, kind: "chat", minTok: 30, maxTok: 200, outMin: 16, outMax: 64}, nil
	case "rag":
		return &synthetic{o: o, rng: rng, kind: "rag", minTok: 1500, maxTok: 6000, outMin: 16, outMax: 64}, nil
	case "multimodal":
		return &synthetic{o: o, rng: rng, kind: "multimodal", minTok: 20, maxTok: 120, outMin: 8, outMax: 48, images: true}, nil
	case "conditional":
		return &synthetic{o: o, rng: rng, kind: "conditional", minTok: 200, maxTok: 2000, outMin: 8, outMax: 48, conditional: true}, nil
	case "sessions":
		return newSessions(o, rng), nil
	case "mixed":
		var gens []Generator
		for _, n := range []string{"chat", "rag", "sessions", "multimodal", "conditional"} {
			g, _ := New(n, Options{Model: o.Model, Seed: o.Seed + int64(len(gens)) + 1, MaxTokensCap: o.MaxTokensCap})
			gens = append(gens, g)
		}
		return &roundRobin{gens: gens}, nil
	case "azure-conv":
		return LoadAzureTrace(o.AzureConvPath, o)
	case "mooncake":
		return LoadMooncakeTrace(o.MooncakePath, o)
	}
	if strings.HasSuffix(name, ".jsonl") || fileExists(name) {
		return LoadJSONL(name)
	}
	return nil, fmt.Errorf("workload %q: not a built-in (%s) nor a JSONL file", name, strings.Join(Names, ", "))
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

type roundRobin struct {
	gens []Generator
	i    int
}

func (r *roundRobin) Next() (Request, bool) {
	for tries := 0; tries < len(r.gens); tries++ {
		g := r.gens[r.i%len(r.gens)]
		r.i++
		if req, ok := g.Next(); ok {
			return req, true
		}
	}
	return Request{}, false
}

// synthetic makes independent requests with prompt lengths uniform in [minTok, maxTok].
type synthetic struct {
	o                              Options
	rng                            *rand.Rand
	kind                           string
	minTok, maxTok, outMin, outMax int
	images, conditional            bool
}

func (s *synthetic) Next() (Request, bool) {
	tokens := s.minTok + s.rng.Intn(s.maxTok-s.minTok+1)
	out := capTokens(s.outMin+s.rng.Intn(s.outMax-s.outMin+1), s.o.MaxTokensCap)
	text := Text(s.rng, tokens)
	var content any = text
	if s.images {
		content = []map[string]any{
			{"type": "text", "text": text},
			{"type": "image_url", "image_url": map[string]string{"url": "https://example.invalid/img/" + strconv.Itoa(s.rng.Intn(64)) + ".png"}},
		}
	}
	return chatRequest(s.kind, s.o.Model, []map[string]any{{"role": "user", "content": content}}, out, nil, s.conditional), true
}

// Text returns about n tokens of seeded filler (the simulator counts 4 bytes per token).
func Text(rng *rand.Rand, tokens int) string {
	words := []string{"the", "data", "path", "token", "cache", "model", "route", "prefill", "decode", "serve", "block", "gpu"}
	var b strings.Builder
	for b.Len() < tokens*4 {
		b.WriteString(words[rng.Intn(len(words))])
		b.WriteByte(' ')
	}
	return b.String()[:tokens*4]
}

func capTokens(n, limit int) int {
	if limit > 0 && n > limit {
		return limit
	}
	if n < 1 {
		return 1
	}
	return n
}

func chatRequest(kind, model string, messages []map[string]any, maxTokens int, headers map[string]string, conditional bool) Request {
	body, _ := json.Marshal(map[string]any{
		"model": model, "messages": messages, "max_tokens": maxTokens, "stream": true,
		"stream_options": map[string]any{"include_usage": true},
	})
	return Request{Kind: kind, Path: "/v1/chat/completions", Body: body, Stream: true, Headers: headers, Conditional: conditional}
}

// sessions runs multi-turn conversations: each turn resends the history (a shared prefix)
// plus a new user message, with x-aibrix-session-key naming the conversation.
type sessions struct {
	o       Options
	rng     *rand.Rand
	convs   [][]map[string]any
	turn    []int
	next    int
	turns   int
	started int
}

func newSessions(o Options, rng *rand.Rand) *sessions {
	const live = 8
	return &sessions{o: o, rng: rng, convs: make([][]map[string]any, live), turn: make([]int, live), turns: 6}
}

func (s *sessions) Next() (Request, bool) {
	i := s.next % len(s.convs)
	s.next++
	if s.convs[i] == nil || s.turn[i] >= s.turns {
		s.started++
		s.convs[i] = []map[string]any{{"role": "system", "content": Text(s.rng, 400)}}
		s.turn[i] = 0
	}
	s.turn[i]++
	s.convs[i] = append(s.convs[i], map[string]any{"role": "user", "content": Text(s.rng, 40+s.rng.Intn(120))})
	msgs := append([]map[string]any(nil), s.convs[i]...)
	out := capTokens(16+s.rng.Intn(48), s.o.MaxTokensCap)
	// The simulator's reply text is unknown here; a fixed-size stand-in keeps the prefix
	// growing the way a real conversation's does.
	s.convs[i] = append(s.convs[i], map[string]any{"role": "assistant", "content": Text(s.rng, out)})
	key := fmt.Sprintf("session-%d-%d", s.o.Seed, s.started*len(s.convs)+i)
	return chatRequest("sessions", s.o.Model, msgs, out, map[string]string{"x-aibrix-session-key": key}, false), true
}
