package tokenestimate

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/precise/kvevents"
	"github.com/pdgate/pdgate/test/testsupport"
)

func chat(msgs ...fwksched.Message) *fwksched.LLMRequest {
	return &fwksched.LLMRequest{TargetModel: "m", Body: &fwksched.LLMRequestBody{
		ChatCompletions: &fwksched.ChatCompletionsRequest{Messages: msgs}}}
}

func msg(role, text string) fwksched.Message {
	// A fresh copy: a follow-up's strings are the new request body's, never the previous one's.
	return fwksched.Message{Role: strings.Clone(role), Content: fwksched.Content{Raw: strings.Clone(text)}}
}

// TestSessionCacheEqualsWholeEstimate replays random conversations turn by turn, each turn
// resending the history with 1-3 new messages of lengths that leave 0-3 bytes of a token
// pending: every turn's tokens and its KV block keys are those of estimating the whole prompt.
func TestSessionCacheEqualsWholeEstimate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	c := NewSessionCache(64 << 20)
	keyer := kvevents.NewKeyer(16, "")
	roles := []string{"system", "user", "assistant", "tool"}
	for conv := 0; conv < 20; conv++ {
		var history []fwksched.Message
		session := fmt.Sprintf("s%d", conv%7) // sessions reused across conversations: a changed history
		for turn := 0; turn < 12; turn++ {
			for range 1 + rng.IntN(3) {
				history = append(history, msg(roles[rng.IntN(len(roles))], strings.Repeat("x", rng.IntN(300))+fmt.Sprint(turn)))
			}
			req := chat(append([]fwksched.Message{}, history...)...)
			for i := range req.Body.ChatCompletions.Messages { // the client resends copies
				m := req.Body.ChatCompletions.Messages[i]
				req.Body.ChatCompletions.Messages[i] = msg(m.Role, m.Content.Raw)
			}
			got, want := c.Estimate(req, EstimateParams{}, session), Estimate(req, EstimateParams{})
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("conversation %d turn %d: session estimate differs from the whole estimate:\n got %d tokens\nwant %d", conv, turn, len(got.TokenIDs), len(want.TokenIDs))
			}
			gk := keyer.RequestKeys(nil, "", got.TokenIDs, "", 0)
			wk := keyer.RequestKeys(nil, "", want.TokenIDs, "", 0)
			if !reflect.DeepEqual(gk, wk) {
				t.Fatalf("conversation %d turn %d: block keys differ", conv, turn)
			}
		}
	}
}

// TestSessionCacheFastPathAppendsInPlace: a follow-up fills the capacity behind the previous
// turn's tokens (no copy of the history), and the previous turn's slice is untouched and
// capped, so no consumer's append can reach what the session fills next.
func TestSessionCacheFastPathAppendsInPlace(t *testing.T) {
	c := NewSessionCache(64 << 20)
	h := []fwksched.Message{msg("system", "You are terse."), msg("user", strings.Repeat("long question ", 50))}
	first := c.Estimate(chat(h...), EstimateParams{}, "s")
	before := append([]uint32(nil), first.TokenIDs...)
	if cap(first.TokenIDs) != len(first.TokenIDs) {
		t.Fatalf("published slice has cap %d > len %d", cap(first.TokenIDs), len(first.TokenIDs))
	}
	next := c.Estimate(chat(append(h, msg("assistant", "ok"), msg("user", "and then?"))...), EstimateParams{}, "s")
	if &next.TokenIDs[0] != &first.TokenIDs[0] {
		t.Fatal("the follow-up copied the history instead of appending in place")
	}
	if !reflect.DeepEqual(first.TokenIDs, before) {
		t.Fatal("the previous turn's tokens changed")
	}
}

func TestSessionCacheFallsBack(t *testing.T) {
	h := []fwksched.Message{msg("user", "hello there")}
	tools := chat(h...)
	tools.Body.ChatCompletions.Tools = []any{map[string]any{"type": "function"}}
	structured := chat(fwksched.Message{Role: "user", Content: fwksched.Content{Structured: []fwksched.ContentBlock{{Type: "text", Text: "hi"}}}})
	completion := &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: "abc"}}}}
	c := NewSessionCache(64 << 20)
	for name, req := range map[string]*fwksched.LLMRequest{"tools": tools, "content parts": structured, "completions": completion, "no body": {}} {
		if got, want := c.Estimate(req, EstimateParams{}, "s"), Estimate(req, EstimateParams{}); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %+v", name, got, want)
		}
	}
	if c.Len() != 0 {
		t.Errorf("requests off the fast path made %d sessions", c.Len())
	}
	// Another model on the same session key, an edited history, a retry: estimated whole.
	c.Estimate(chat(h...), EstimateParams{}, "s")
	other := chat(append(h, msg("user", "next"))...)
	other.TargetModel = "other"
	edited := chat(msg("user", "hello THERE"), msg("user", "next"))
	for name, req := range map[string]*fwksched.LLMRequest{"other model": other, "edited history": edited, "retry": edited} {
		if got, want := c.Estimate(req, EstimateParams{}, "s"), Estimate(req, EstimateParams{}); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: differs from the whole estimate", name)
		}
	}
}

// TestSessionCacheConcurrentDivergingTurns: two follow-ups of one session arriving together
// with different new messages both get their own tokens (one appends in place, the other is
// estimated whole), under -race.
func TestSessionCacheConcurrentDivergingTurns(t *testing.T) {
	c := NewSessionCache(64 << 20)
	h := []fwksched.Message{msg("user", strings.Repeat("shared history ", 100))}
	c.Estimate(chat(h...), EstimateParams{}, "s")
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := chat(append(append([]fwksched.Message{}, h...), msg("user", fmt.Sprintf("branch %d %s", i, strings.Repeat("y", i))))...)
			if got, want := c.Estimate(req, EstimateParams{}, "s"), Estimate(req, EstimateParams{}); !reflect.DeepEqual(got, want) {
				t.Errorf("branch %d differs from the whole estimate", i)
			}
		}()
	}
	wg.Wait()
}

func TestSessionCacheEvictsBeyondItsBudget(t *testing.T) {
	c := NewSessionCache(200 << 10)
	for i := range 20 {
		c.Estimate(chat(msg("user", strings.Repeat("z", 20<<10))), EstimateParams{}, fmt.Sprint(i))
	}
	if c.Len() == 0 || c.Len() >= 20 {
		t.Fatalf("%d sessions held under a 200 KiB budget of ~45 KiB sessions", c.Len())
	}
	if c.bytes > c.maxBytes {
		t.Fatalf("%d bytes held, budget %d", c.bytes, c.maxBytes)
	}
}

// BenchmarkFollowUpEstimate: a follow-up turn (2 new messages, ~100 tokens) of a 50,000-token
// history, estimated whole and through the session cache, timed in the same run; prints the
// ratio. Each session starts at the history, so every timed call is a real follow-up.
func BenchmarkFollowUpEstimate(b *testing.B) {
	var history []fwksched.Message
	for i := 0; i < 20; i++ {
		history = append(history, msg([]string{"user", "assistant"}[i%2], strings.Repeat("history turn text with some words. ", 286)))
	}
	followUp := func() *fwksched.LLMRequest {
		msgs := make([]fwksched.Message, 0, len(history)+2)
		for _, m := range history {
			msgs = append(msgs, msg(m.Role, m.Content.Raw))
		}
		return chat(append(msgs, msg("assistant", "An answer of a few words."), msg("user", strings.Repeat("And a new question? ", 18)))...)
	}
	const sessions = 64
	reqs := make([]*fwksched.LLMRequest, sessions)
	for i := range reqs {
		reqs[i] = followUp()
	}
	tokens := len(Estimate(reqs[0], EstimateParams{}).TokenIDs)
	keys := make([]string, sessions) // a session key arrives as a header's string
	for i := range keys {
		keys[i] = fmt.Sprint(i)
	}
	// CPU time of the process, not wall time: on a shared machine a pass of a few ms is often
	// descheduled, which wall time would charge to whichever pass it hit. Process time also
	// counts the collector's work on other threads, which is part of what each pass costs a
	// server (the whole pass allocates a prompt-sized token slice per turn).
	var whole, cached time.Duration
	var n int
	for b.Loop() {
		c := NewSessionCache(1 << 30)
		for i := range sessions {
			c.Estimate(chat(history...), EstimateParams{}, keys[i])
		}
		start := testsupport.ProcessCPU()
		for i := range sessions {
			Estimate(reqs[i], EstimateParams{})
		}
		whole += testsupport.ProcessCPU() - start
		start = testsupport.ProcessCPU()
		for i := range sessions {
			c.Estimate(reqs[i], EstimateParams{}, keys[i])
		}
		cached += testsupport.ProcessCPU() - start
		n += sessions
	}
	b.ReportMetric(float64(whole.Nanoseconds())/float64(n), "whole-ns/turn")
	b.ReportMetric(float64(cached.Nanoseconds())/float64(n), "session-ns/turn")
	b.ReportMetric(float64(whole)/float64(cached), "x-less-CPU")
	b.Logf("follow-up of %d tokens: whole %.1f µs, session cache %.1f µs, %.1fx less", tokens,
		float64(whole.Microseconds())/float64(n), float64(cached.Microseconds())/float64(n), float64(whole)/float64(cached))
}

// TestMinTokensIsALowerBound: over chats with tools, parts and images, and completions, the
// bound never exceeds the estimate's count, and it is within a token per message of it for
// plain text.
func TestMinTokensIsALowerBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 500; i++ {
		var msgs []fwksched.Message
		for range 1 + rng.IntN(5) {
			m := msg("user", strings.Repeat("z", rng.IntN(40)))
			if rng.IntN(4) == 0 {
				m.Content.Structured = []fwksched.ContentBlock{{Type: "text", Text: strings.Repeat("y", rng.IntN(9))},
					{Type: "image_url", ImageURL: fwksched.ImageBlock{Url: "https://x/i.png"}}}
			}
			msgs = append(msgs, m)
		}
		req := chat(msgs...)
		if rng.IntN(5) == 0 {
			req.Body.ChatCompletions.Tools = []any{map[string]any{"type": "function"}}
		}
		n := len(Estimate(req, EstimateParams{}).TokenIDs)
		if lb := MinTokens(req); lb > n || (plainChat(req) && n-lb > len(msgs)+1) {
			t.Fatalf("request %d: MinTokens %d, estimate %d tokens over %d messages", i, lb, n, len(msgs))
		}
	}
	completion := &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: "abcdefghij"}}}}
	if lb, n := MinTokens(completion), len(Estimate(completion, EstimateParams{}).TokenIDs); lb != 2 || n != 3 {
		t.Fatalf("completion: bound %d, estimate %d", lb, n)
	}
}
