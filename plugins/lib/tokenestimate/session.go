package tokenestimate

import (
	"container/list"
	"sync"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/wire/bytetokens"
)

// SessionCache lets a follow-up turn of a chat session pack only its new messages. A chat
// client resends the whole conversation every turn, so a 50,000-token history is packed
// again for each short question; most of that cost is allocating and filling a new token
// slice as long as the prompt. The cache keeps, per session, the previous request's messages
// and its token slice with room to grow. A request whose leading messages are exactly the
// session's previous ones (compared as strings, which costs a memory compare, not a pack)
// appends the tokens of its new messages after them in place.
//
// The tokens are those of Estimate, token for token: a message starts on a token boundary
// (plugins/wire/bytetokens), so the tokens of a conversation's first k messages do not depend
// on what follows. Only text chat requests take the fast path (no tools, every message a
// plain string); anything else, a new session, a changed history, or a session another
// request extended meanwhile is estimated whole and becomes the session's entry.
//
// Published token slices never change: they are capped at their length, and the cache
// appends only beyond the longest length it has published for the session.
type SessionCache struct {
	maxBytes int
	mu       sync.Mutex
	bytes    int
	order    *list.List // of *session, most recent first
	byKey    map[string]*list.Element
}

// session is one conversation's last request.
type session struct {
	key   string
	model string
	// mu guards the fields below and the tokens' spare capacity.
	mu       sync.Mutex
	roles    []string
	contents []string
	tokens   []uint32 // the last request's tokens; cap beyond len is this session's to fill
	size     int      // the entry's bytes: its tokens' capacity and its message texts
	// accounted is the size the cache counted for it (guarded by the cache's mu).
	accounted int
}

// NewSessionCache returns a cache holding at most maxBytes of sessions (their token slices'
// capacity and message texts); the least recently used sessions are dropped beyond it.
func NewSessionCache(maxBytes int) *SessionCache {
	return &SessionCache{maxBytes: maxBytes, order: list.New(), byKey: map[string]*list.Element{}}
}

// Estimate returns Estimate(request, p), packing only the messages after the session's
// previous request when it can. An empty key (no session) is Estimate.
func (c *SessionCache) Estimate(request *fwksched.LLMRequest, p EstimateParams, key string) *fwksched.TokenizedPrompt {
	if c == nil || key == "" || !plainChat(request) {
		return Estimate(request, p)
	}
	msgs := request.Body.ChatCompletions.Messages
	if s := c.get(key); s != nil && s.model == request.TargetModel {
		if tp := s.extend(msgs); tp != nil {
			c.resize(s)
			return tp
		}
	}
	s := &session{key: key, model: request.TargetModel}
	tp := s.fill(msgs)
	c.put(s)
	return tp
}

// plainChat reports whether request is a chat request the session path packs: no tools and
// every message's content a plain string.
func plainChat(request *fwksched.LLMRequest) bool {
	if request == nil || request.Body == nil || request.Body.ChatCompletions == nil {
		return false
	}
	c := request.Body.ChatCompletions
	if len(c.Tools) > 0 || len(c.Messages) == 0 {
		return false
	}
	for _, m := range c.Messages {
		if len(m.Content.Structured) > 0 {
			return false
		}
	}
	return true
}

// fill packs msgs whole into a new slice with room for the next turns (what Estimate gives for
// a plain chat request).
func (s *session) fill(msgs []fwksched.Message) *fwksched.TokenizedPrompt {
	var pk bytetokens.Packer
	pk.Grow(headroom(chatTextBytes(msgs)))
	for _, m := range msgs {
		pk.ChatMessage(m.Role, m.Content.Raw)
	}
	pk.Flush()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.record(msgs, 0, pk.Tokens)
	return published(pk.Tokens)
}

// extend packs the messages after the session's previous ones in place; nil when msgs does
// not start with them, adds nothing, or the session moved on.
func (s *session) extend(msgs []fwksched.Message) *fwksched.TokenizedPrompt {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := len(s.roles)
	if len(msgs) <= k {
		return nil
	}
	for i := 0; i < k; i++ {
		if msgs[i].Role != s.roles[i] || msgs[i].Content.Raw != s.contents[i] {
			return nil
		}
	}
	pk := bytetokens.Packer{Tokens: s.tokens}
	if n := chatTextBytes(msgs[k:]); cap(s.tokens)-len(s.tokens) < n/bytetokens.BytesPerToken+len(msgs) {
		pk.Grow(headroom(chatTextBytes(msgs))) // one copy now, then in place again
	}
	for _, m := range msgs[k:] {
		pk.ChatMessage(m.Role, m.Content.Raw)
	}
	pk.Flush()
	s.record(msgs, k, pk.Tokens)
	return published(pk.Tokens)
}

// record makes msgs and tokens the session's last request; msgs[:k] are already recorded.
// The roles and contents are copied into slices of the session's own (their strings are the
// request's), so a later request's messages never alias them.
func (s *session) record(msgs []fwksched.Message, k int, tokens []uint32) {
	s.roles, s.contents = s.roles[:k:k], s.contents[:k:k]
	for _, m := range msgs[k:] {
		s.roles = append(s.roles, m.Role)
		s.contents = append(s.contents, m.Content.Raw)
	}
	s.tokens = tokens
	s.size = cap(tokens)*4 + chatTextBytes(msgs)
}

// headroom sizes a session's token slice: the prompt plus a quarter, at least 4 KiB of text,
// so that the next few turns append in place.
func headroom(textBytes int) int { return textBytes + max(textBytes/4, 4096) }

// published is tokens as a request sees it: capped at its length, so that no consumer's
// append can reach the capacity the session fills next.
func published(tokens []uint32) *fwksched.TokenizedPrompt {
	if len(tokens) == 0 {
		return &fwksched.TokenizedPrompt{} // as Estimate: no text, nil ids
	}
	return &fwksched.TokenizedPrompt{TokenIDs: tokens[:len(tokens):len(tokens)]}
}

func (c *SessionCache) get(key string) *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[key]
	if !ok {
		return nil
	}
	c.order.MoveToFront(e)
	return e.Value.(*session)
}

// put makes s the entry of its key, replacing any other.
func (c *SessionCache) put(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.byKey[s.key]; ok {
		c.bytes -= e.Value.(*session).accounted
		c.order.Remove(e)
	}
	s.accounted = s.size // s is not shared yet
	c.byKey[s.key] = c.order.PushFront(s)
	c.bytes += s.accounted
	c.evictLocked()
}

// resize accounts for s having grown.
func (c *SessionCache) resize(s *session) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.byKey[s.key]
	if !ok || e.Value.(*session) != s {
		return
	}
	old := s.accounted
	s.mu.Lock()
	s.accounted = s.size
	s.mu.Unlock()
	c.bytes += s.accounted - old
	c.evictLocked()
}

func (c *SessionCache) evictLocked() {
	for c.bytes > c.maxBytes && c.order.Len() > 0 {
		e := c.order.Back()
		s := e.Value.(*session)
		c.order.Remove(e)
		delete(c.byKey, s.key)
		c.bytes -= s.accounted
	}
}

// Len returns the number of sessions held.
func (c *SessionCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
