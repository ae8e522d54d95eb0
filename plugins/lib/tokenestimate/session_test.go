package tokenestimate

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"slices"
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

// TestSessionCacheProvesTheHistory: a follow-up whose leading messages differ from the
// session's by one byte (of equal length, so only the compare can tell) is estimated whole;
// only an unchanged history, or one that packs to the same bytes, appends in place.
func TestSessionCacheProvesTheHistory(t *testing.T) {
	h := []fwksched.Message{msg("system", "You are terse."), msg("user", "What is 2+2? Answer in one word.")}
	cases := []struct {
		name    string
		history []fwksched.Message
		inPlace bool
	}{
		{"unchanged", h, true},
		{"role changed", []fwksched.Message{msg("sysadm", "You are terse."), h[1]}, false},
		{"first byte of a content", []fwksched.Message{msg("system", "you are terse."), h[1]}, false},
		{"last byte of a content", []fwksched.Message{h[0], msg("user", "What is 2+2? Answer in one word!")}, false},
		{"middle of the last message", []fwksched.Message{h[0], msg("user", "What is 2+3? Answer in one word.")}, false},
		{"role and content split elsewhere, same bytes", []fwksched.Message{msg("sys", "temYou are terse."), h[1]}, true},
		{"a message's byte moved to the next", []fwksched.Message{msg("system", "You are terse"), msg("user", ".What is 2+2? Answer in one word.")}, false},
		{"a message inserted", []fwksched.Message{h[0], msg("user", ""), h[1]}, false},
	}
	keyer := kvevents.NewKeyer(16, "")
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := NewSessionCache(64 << 20)
			first := c.Estimate(chat(h...), EstimateParams{}, "s")
			req := chat(append(append([]fwksched.Message{}, tc.history...), msg("assistant", "Four."), msg("user", "And 3+3?"))...)
			got, want := c.Estimate(req, EstimateParams{}, "s"), Estimate(req, EstimateParams{})
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("session estimate differs from the whole estimate:\n got %x\nwant %x", got.TokenIDs, want.TokenIDs)
			}
			if !reflect.DeepEqual(keyer.RequestKeys(nil, "", got.TokenIDs, "", 0), keyer.RequestKeys(nil, "", want.TokenIDs, "", 0)) {
				t.Fatal("block keys differ")
			}
			if inPlace := &got.TokenIDs[0] == &first.TokenIDs[0]; inPlace != tc.inPlace {
				t.Fatalf("appended in place: %v, want %v", inPlace, tc.inPlace)
			}
		})
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

// rewind truncates key's session back to its first k messages, so that the benchmark can time
// the same follow-up again without allocating a new session (a test-only hook: it reuses
// capacity the cache has published, which the benchmark discards).
func rewind(c *SessionCache, key string, k int) {
	s := c.byKey[key].Value.(*session)
	n := 0
	for _, l := range s.lens[:k] {
		n += (l + BytesPerToken - 1) / BytesPerToken
	}
	s.lens, s.tokens = s.lens[:k], s.tokens[:n]
}

// BenchmarkFollowUpEstimate: a follow-up turn (2 new messages, ~100 tokens) of a 50,000-token
// history, estimated whole and through the session cache, timed in the same run. It prints two
// ratios: x-less-CPU, of the process's CPU time over all passes (what a server pays, the
// collector's and the scavenger's threads included), and x-less-thread-CPU, the median over
// passes of the benchmark thread's CPU time (the estimates' own work, their page faults and
// the collection assists they pay).
//
// What each figure includes, so that neither side is charged for the other's work: every
// session holds its own copy of the history (a server's sessions share no memory, and the
// session path must read its history back to prove it unchanged), and all time the same
// follow-up request, which stays in cache as one the EPP has just decoded would. The heap is in
// a steady state: no collection is forced (a forced one left the scavenger returning the whole
// side's garbage while the session side was timed), a warm-up pass is not counted, and each
// pass runs 256 follow-ups whole, then 4 rounds of the 64 sessions' follow-ups, each round
// after rewinding the sessions to the history.
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
	const sessions, rounds = 64, 4
	c := NewSessionCache(1 << 30)
	req := followUp()
	keys := make([]string, sessions) // a session key arrives as a header's string
	for i := range keys {
		keys[i] = fmt.Sprint(i)
		c.Estimate(followUp(), EstimateParams{}, keys[i]) // the turn before: the history and a reply
	}
	tokens := len(Estimate(req, EstimateParams{}).TokenIDs)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var whole, cached, wholeProc, cachedProc time.Duration
	var ratios []float64
	pass := func() (w, s, wp, sp time.Duration) {
		t, p := testsupport.ThreadCPU(), testsupport.ProcessCPU()
		for range rounds * sessions {
			Estimate(req, EstimateParams{})
		}
		w, wp = testsupport.ThreadCPU()-t, testsupport.ProcessCPU()-p
		for range rounds {
			for i := range sessions {
				rewind(c, keys[i], len(history))
			}
			t, p = testsupport.ThreadCPU(), testsupport.ProcessCPU()
			for i := range sessions {
				c.Estimate(req, EstimateParams{}, keys[i])
			}
			s, sp = s+testsupport.ThreadCPU()-t, sp+testsupport.ProcessCPU()-p
		}
		return w, s, wp, sp
	}
	pass() // warm-up: the heap grows to its steady size
	for b.Loop() {
		w, s, wp, sp := pass()
		whole, cached, wholeProc, cachedProc = whole+w, cached+s, wholeProc+wp, cachedProc+sp
		ratios = append(ratios, float64(w)/float64(max(s, 1)))
	}
	n := float64(len(ratios) * rounds * sessions)
	slices.Sort(ratios)
	median, process := ratios[len(ratios)/2], float64(wholeProc)/float64(max(cachedProc, 1))
	b.ReportMetric(float64(wholeProc.Nanoseconds())/n, "whole-ns/turn")
	b.ReportMetric(float64(cachedProc.Nanoseconds())/n, "session-ns/turn")
	b.ReportMetric(float64(whole.Nanoseconds())/n, "whole-thread-ns/turn")
	b.ReportMetric(float64(cached.Nanoseconds())/n, "session-thread-ns/turn")
	b.ReportMetric(process, "x-less-CPU")
	b.ReportMetric(median, "x-less-thread-CPU")
	b.Logf("follow-up of %d tokens, %d passes: process CPU whole %.1f µs, session cache %.1f µs, %.1fx less; thread CPU whole %.1f µs, session cache %.1f µs, per pass %.1fx less (median), %.1fx to %.1fx",
		tokens, len(ratios), float64(wholeProc.Nanoseconds())/n/1e3, float64(cachedProc.Nanoseconds())/n/1e3, process,
		float64(whole.Nanoseconds())/n/1e3, float64(cached.Nanoseconds())/n/1e3, median, ratios[0], ratios[len(ratios)-1])
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
