package server

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/pdgate/pdgate/cmd/sim/batching"
)

// kvEntry is the KV one prefill leg produced, waiting for its decode leg to pull it.
type kvEntry struct {
	ID         string `json:"id"`
	Dialect    string `json:"dialect"`
	EngineID   string `json:"engine_id"`
	Tokens     int    `json:"tokens"`
	PromptHash string `json:"prompt_hash"`
	FirstToken uint32 `json:"first_token"`
	BlockIDs   []int  `json:"block_ids"`
	// Rank is the producer's data-parallel rank (0 without ranks).
	Rank int `json:"rank"`

	state   entryState
	reason  string
	expires time.Time
	ready   chan struct{} // closed when the entry leaves pending
}

type entryState int

const (
	statePending entryState = iota // a decode waits for a prefill not yet done
	stateReady
	stateFailed
	stateConsumed
)

// pullError carries the HTTP status of a failed pull.
type pullError struct {
	status int
	msg    string
}

func (e *pullError) Error() string { return fmt.Sprintf("%d: %s", e.status, e.msg) }

// handoffStore keeps produced KV with a TTL on the model clock.
type handoffStore struct {
	clock batching.Clock
	ttl   time.Duration
	mu    sync.Mutex
	m     map[string]*kvEntry
	ops   int
}

func newHandoffStore(clock batching.Clock, ttl time.Duration) *handoffStore {
	return &handoffStore{clock: clock, ttl: ttl, m: map[string]*kvEntry{}}
}

func (s *handoffStore) getLocked(id string) *kvEntry {
	e, ok := s.m[id]
	if !ok {
		e = &kvEntry{ID: id, state: statePending, ready: make(chan struct{}), expires: s.clock.Now().Add(s.ttl)}
		s.m[id] = e
	}
	return e
}

// sweepLocked drops expired entries now and then (amortised over operations).
func (s *handoffStore) sweepLocked() {
	s.ops++
	if s.ops%256 != 0 {
		return
	}
	now := s.clock.Now()
	for id, e := range s.m {
		if now.After(e.expires.Add(s.ttl)) {
			delete(s.m, id)
		}
	}
}

// produce publishes KV under e.ID. An id already produced or consumed is a conflict.
func (s *handoffStore) produce(e kvEntry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked()
	cur := s.getLocked(e.ID)
	if cur.state != statePending {
		return &pullError{http.StatusConflict, fmt.Sprintf("KV handoff id %q was already used", e.ID)}
	}
	ready := cur.ready
	*cur = e
	cur.state, cur.ready, cur.expires = stateReady, ready, s.clock.Now().Add(s.ttl)
	close(ready)
	return nil
}

// fail marks the prefill for id as failed so that a waiting or later pull fails at once.
func (s *handoffStore) fail(id, reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.getLocked(id)
	if cur.state != statePending {
		return
	}
	cur.state, cur.reason = stateFailed, reason
	cur.expires = s.clock.Now().Add(s.ttl)
	close(cur.ready)
}

// pullRequest is the body of POST /internal/kv/pull.
type pullRequest struct {
	ID       string `json:"id"`
	Dialect  string `json:"dialect"`
	EngineID string `json:"engine_id,omitempty"`
	BlockIDs []int  `json:"block_ids,omitempty"`
	WaitMS   int64  `json:"wait_ms,omitempty"`
}

// pull consumes the KV for req.ID, waiting up to req.WaitMS of model time for it to appear.
func (s *handoffStore) pull(ctx context.Context, req pullRequest) (kvEntry, error) {
	s.mu.Lock()
	s.sweepLocked()
	if _, known := s.m[req.ID]; !known && req.WaitMS <= 0 {
		s.mu.Unlock()
		return kvEntry{}, &pullError{http.StatusNotFound, fmt.Sprintf("no KV handoff with id %q on this server", req.ID)}
	}
	e := s.getLocked(req.ID)
	ready := e.ready
	s.mu.Unlock()

	if req.WaitMS > 0 {
		timeout := make(chan struct{})
		t := s.clock.AfterFunc(time.Duration(req.WaitMS)*time.Millisecond, func() { close(timeout) })
		select {
		case <-ready:
		case <-timeout:
		case <-ctx.Done():
		}
		t.Stop()
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case e.state == statePending:
		return kvEntry{}, &pullError{http.StatusNotFound, fmt.Sprintf("no KV handoff with id %q arrived within %dms", req.ID, req.WaitMS)}
	case e.state == stateFailed:
		return kvEntry{}, &pullError{http.StatusBadGateway, fmt.Sprintf("the prefill for KV handoff %q failed: %s", req.ID, e.reason)}
	case e.state == stateConsumed:
		return kvEntry{}, &pullError{http.StatusGone, fmt.Sprintf("KV handoff %q was already consumed", req.ID)}
	case s.clock.Now().After(e.expires):
		return kvEntry{}, &pullError{http.StatusGone, fmt.Sprintf("KV handoff %q expired", req.ID)}
	case req.Dialect != "" && req.Dialect != e.Dialect:
		return kvEntry{}, &pullError{http.StatusConflict, fmt.Sprintf("KV handoff %q was produced by a %s engine, not %s", req.ID, e.Dialect, req.Dialect)}
	case req.EngineID != "" && req.EngineID != e.EngineID:
		return kvEntry{}, &pullError{http.StatusConflict, fmt.Sprintf("KV handoff %q belongs to engine %q, not %q", req.ID, e.EngineID, req.EngineID)}
	case req.BlockIDs != nil && !slices.Equal(req.BlockIDs, e.BlockIDs):
		return kvEntry{}, &pullError{http.StatusConflict, fmt.Sprintf("KV handoff %q: block ids do not match the produced blocks", req.ID)}
	}
	e.state = stateConsumed
	return *e, nil
}

// pending reports entries produced but not pulled (metrics).
func (s *handoffStore) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	now := s.clock.Now()
	for _, e := range s.m {
		if e.state == stateReady && !now.After(e.expires) {
			n++
		}
	}
	return n
}
