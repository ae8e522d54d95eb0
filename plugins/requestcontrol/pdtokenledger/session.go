package pdtokenledger

import (
	"sync"
	"time"

	"github.com/go-logr/logr"
)

type sessionKey struct{ model, key string }

type session struct {
	prompt int
	seen   time.Time
}

// sessionTable remembers each (model, x-aibrix-session-key)'s last prompt length. It never
// holds more than max entries: when full, new keys are not recorded.
type sessionTable struct {
	max     int
	ttl     time.Duration
	metrics *Metrics
	log     logr.Logger

	mu         sync.Mutex
	m          map[sessionKey]*session
	fullWarned bool
}

func newSessionTable(maxSessions int, ttl time.Duration, m *Metrics, log logr.Logger) *sessionTable {
	return &sessionTable{max: maxSessions, ttl: ttl, metrics: m, log: log, m: map[sessionKey]*session{}}
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
	if e := s.m[k]; e != nil {
		if now.Sub(e.seen) <= s.ttl {
			prev, found = e.prompt, true
		}
		e.prompt, e.seen = prompt, now
		return prev, found
	}
	if len(s.m) >= s.max {
		s.metrics.sessionsFull.Inc()
		if !s.fullWarned {
			s.fullWarned = true
			s.log.Info("Token-load session table full; new sessions are not tracked until idle ones expire", "maxSessions", s.max)
		}
		return 0, false
	}
	s.m[k] = &session{prompt: prompt, seen: now}
	s.metrics.sessions.Set(float64(len(s.m)))
	return 0, false
}

// expire forgets sessions idle longer than the TTL and returns how many it dropped.
func (s *sessionTable) expire(now time.Time) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for k, e := range s.m {
		if now.Sub(e.seen) > s.ttl {
			delete(s.m, k)
			n++
		}
	}
	if n > 0 {
		s.fullWarned = false
	}
	s.metrics.sessions.Set(float64(len(s.m)))
	return n
}

func (s *sessionTable) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
