package tokenestimate

import (
	"container/list"
	"sync"
	"unsafe"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/wire/bytetokens"
)

// SessionCache lets a follow-up turn of a chat session pack only its new messages. A chat
// client resends the whole conversation every turn, so a 50,000-token history is packed
// again for each short question; most of that cost is allocating and filling a new token
// slice as long as the prompt. The cache keeps, per session, the previous request's token
// slice with room to grow and each message's text length. A request whose leading messages
// pack to exactly the session's tokens appends the tokens of its new messages after them in
// place.
//
// The proof is a memory compare of each leading message's role and content with the bytes
// its tokens were packed from (bytetokens.PackedText), lengths included, so the tokens are
// those of Estimate, token for token: a message starts on a token boundary
// (plugins/wire/bytetokens), so the tokens of a conversation's first k messages do not depend
// on what follows. Comparing with the tokens rather than with the previous request's strings
// keeps no request text alive (a decoded body's strings may pin the whole body) and halves
// what a session holds. Only text chat requests take the fast path (no tools, every message a
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
	mu sync.Mutex
	// lens are the last request's messages' text lengths (role plus content bytes); message i
	// fills the next ceil(lens[i]/4) tokens.
	lens   []int
	tokens []uint32 // the last request's tokens; cap beyond len is this session's to fill
	size   int      // the entry's bytes: its tokens' and lens' capacity
	// accounted is the size the cache counted for it (guarded by the cache's mu).
	accounted int
}

// NewSessionCache returns a cache holding at most maxBytes of sessions (their token slices'
// capacity); the least recently used sessions are dropped beyond it.
func NewSessionCache(maxBytes int) *SessionCache {
	return &SessionCache{maxBytes: maxBytes, order: list.New(), byKey: map[string]*list.Element{}}
}

// Estimate returns Estimate(request, p), packing only the messages after the session's
// previous request when it can. An empty key (no session) is Estimate.
func (c *SessionCache) Estimate(request *fwksched.LLMRequest, p EstimateParams, key string) *fwksched.TokenizedPrompt {
	if c == nil || key == "" || !plainChat(request) || !bytetokens.TextInOrder() {
		return Estimate(request, p)
	}
	msgs := request.Body.ChatCompletions.Messages
	if s := c.get(key); s != nil && s.model == request.TargetModel {
		if tp, grew := s.extend(msgs); tp != nil {
			if grew {
				c.resize(s)
			}
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
	pk.Grow(headroom(chatBytesBound(msgs)))
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
// not start with them, adds nothing, or the session moved on. grew reports that the session's
// size changed.
func (s *session) extend(msgs []fwksched.Message) (tp *fwksched.TokenizedPrompt, grew bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := len(s.lens)
	if len(msgs) <= k || !s.packs(msgs[:k]) {
		return nil, false
	}
	pk := bytetokens.Packer{Tokens: s.tokens}
	if n := chatBytesBound(msgs[k:]); cap(s.tokens)-len(s.tokens) < n/bytetokens.BytesPerToken+1 {
		// One copy now to the whole prompt plus headroom, then in place again.
		pk.Grow(headroom(len(s.tokens)*bytetokens.BytesPerToken+n) - len(s.tokens)*bytetokens.BytesPerToken)
	}
	for _, m := range msgs[k:] {
		pk.ChatMessage(m.Role, m.Content.Raw)
	}
	pk.Flush()
	size := s.size
	s.record(msgs, k, pk.Tokens)
	return published(pk.Tokens), s.size != size
}

// packs reports whether msgs pack to exactly the session's tokens: each message's text has
// the recorded length and equals the bytes its tokens were packed from (a memory compare that
// stops at the first difference). msgs has len(s.lens) messages.
func (s *session) packs(msgs []fwksched.Message) bool {
	text, ok := bytetokens.PackedText(s.tokens)
	if !ok {
		return false
	}
	off := 0
	for i, m := range msgs {
		n, r := s.lens[i], len(m.Role)
		if r+len(m.Content.Raw) != n || text[off:off+r] != m.Role || text[off+r:off+n] != m.Content.Raw {
			return false
		}
		off += (n + bytetokens.BytesPerToken - 1) &^ (bytetokens.BytesPerToken - 1)
	}
	return off == len(text)
}

// record makes msgs and tokens the session's last request; msgs[:k] are already recorded.
func (s *session) record(msgs []fwksched.Message, k int, tokens []uint32) {
	s.lens = s.lens[:k]
	for _, m := range msgs[k:] {
		s.lens = append(s.lens, len(m.Role)+len(m.Content.Raw))
	}
	s.tokens = tokens
	s.size = cap(tokens)*bytetokens.BytesPerToken + cap(s.lens)*int(unsafe.Sizeof(0))
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
