package sessionaffinity

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"
)

// maxKeyBytes is the longest session ID stored as is; longer ones are stored as their SHA-256,
// so a client cannot make one binding cost kilobytes (same binding, smaller key).
const maxKeyBytes = 128

// tableKey is the key a session ID is stored under.
func tableKey(id string) string {
	if len(id) <= maxKeyBytes {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "sha256:" + hex.EncodeToString(sum[:])
}

type binding struct {
	endpoint string
	lastSeen time.Time
}

// Table binds session IDs to endpoint IDs (namespace/name). A binding idle longer than the TTL
// is gone for every reader at once (Get checks the age), and Sweep frees its memory. The table
// never holds more than max bindings: a new session beyond that is not bound.
type Table struct {
	ttl time.Duration
	max int

	mu sync.Mutex
	m  map[string]binding
}

// NewTable returns an empty table.
func NewTable(ttl time.Duration, maxBindings int) *Table {
	return &Table{ttl: ttl, max: maxBindings, m: map[string]binding{}}
}

// Outcome is what Settle did.
type Outcome int

// Settle outcomes.
const (
	Bound   Outcome = iota // a new binding
	Touched                // the pick is the binding: lastSeen refreshed
	Rebound                // the binding moved to the pick
	Kept                   // the binding stays as it was (present but outscored)
	Refused                // a new session and the table is full
)

// Get returns the endpoint bound to the session, unless the binding expired.
func (t *Table) Get(id string, now time.Time) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.get(tableKey(id), now)
	return b.endpoint, ok
}

func (t *Table) get(k string, now time.Time) (binding, bool) {
	b, ok := t.m[k]
	if !ok || now.Sub(b.lastSeen) > t.ttl {
		return binding{}, false
	}
	return b, true
}

// Settle records that the session's request went to pick. An unbound (or expired) session is
// bound to it; a pick equal to the binding refreshes it; a different pick moves the binding
// only when move is true (the bound endpoint was not a candidate, or was too loaded), so a
// bound endpoint that was present but outscored keeps the session (llm-d's rule).
func (t *Table) Settle(id, pick string, move bool, now time.Time) Outcome {
	k := tableKey(id)
	t.mu.Lock()
	defer t.mu.Unlock()
	b, ok := t.get(k, now)
	switch {
	case !ok:
		if _, exists := t.m[k]; !exists && len(t.m) >= t.max {
			return Refused
		}
		t.m[k] = binding{endpoint: pick, lastSeen: now}
		return Bound
	case b.endpoint == pick:
		t.m[k] = binding{endpoint: pick, lastSeen: now}
		return Touched
	case move:
		t.m[k] = binding{endpoint: pick, lastSeen: now}
		return Rebound
	default:
		return Kept
	}
}

// Sweep deletes the bindings idle longer than the TTL and returns how many it deleted.
func (t *Table) Sweep(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k, b := range t.m {
		if now.Sub(b.lastSeen) > t.ttl {
			delete(t.m, k)
			n++
		}
	}
	return n
}

// Len is the number of bindings held (expired ones count until swept).
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}
