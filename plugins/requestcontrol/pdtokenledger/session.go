package pdtokenledger

import (
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/pdgate/pdgate/plugins/internal/ttltable"
)

type sessionKey struct{ model, key string }

// sessionTable remembers each (model, x-aibrix-session-key)'s last prompt length. It never
// holds more than max entries: when full, new keys are not recorded.
type sessionTable struct {
	max     int
	ttl     time.Duration
	metrics *Metrics
	log     logr.Logger

	mu         sync.Mutex
	m          *ttltable.Table[sessionKey, int]
	fullWarned bool
}

func newSessionTable(maxSessions int, ttl time.Duration, m *Metrics, log logr.Logger) *sessionTable {
	return &sessionTable{max: maxSessions, ttl: ttl, metrics: m, log: log, m: ttltable.New[sessionKey, int](ttl, maxSessions)}
}

// observe records prompt as the session's new baseline and returns the previous one when the
// session is known and not expired. Keys over MaxSessionKeyBytes and a zero TTL disable it.
func (s *sessionTable) observe(model, key string, prompt int, now time.Time) (prev int, found bool) {
	if s.ttl <= 0 || key == "" || len(key) > MaxSessionKeyBytes {
		return 0, false
	}
	k := sessionKey{model: model, key: key}
	s.mu.Lock()
	defer s.mu.Unlock()
	prev, found = s.m.Get(k, now)
	held := s.m.Len()
	if !s.m.Put(k, prompt, now) {
		s.metrics.sessionsFull.Inc()
		if !s.fullWarned {
			s.fullWarned = true
			s.log.Info("Token-load session table full; new sessions are not tracked until idle ones expire", "maxSessions", s.max)
		}
		return 0, false
	}
	if s.m.Len() != held {
		s.metrics.sessions.Set(float64(s.m.Len()))
	}
	return prev, found
}

// expire forgets sessions idle longer than the TTL and returns how many it dropped.
func (s *sessionTable) expire(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.m.Sweep(now)
	if n > 0 {
		s.fullWarned = false
	}
	s.metrics.sessions.Set(float64(s.m.Len()))
	return n
}

func (s *sessionTable) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m.Len()
}
