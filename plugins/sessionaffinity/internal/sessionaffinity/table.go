package sessionaffinity

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"time"

	"github.com/pdgate/pdgate/plugins/internal/ttltable"
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

// Table binds session IDs to endpoint IDs (namespace/name). A binding idle longer than the TTL
// is gone for every reader at once (Get checks the age), and Sweep frees its memory. The table
// never holds more than max bindings: a new session beyond that is not bound.
type Table struct {
	mu sync.Mutex
	m  *ttltable.Table[string, string] // session key -> endpoint ID
}

// NewTable returns an empty table.
func NewTable(ttl time.Duration, maxBindings int) *Table {
	return &Table{m: ttltable.New[string, string](ttl, maxBindings)}
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
	return t.m.Get(tableKey(id), now)
}

// Settle records that the session's request went to pick. An unbound (or expired) session is
// bound to it; a pick equal to the binding refreshes it; a different pick moves the binding
// only when move is true (the bound endpoint was not a candidate, or was too loaded), so a
// bound endpoint that was present but outscored keeps the session (llm-d's rule).
func (t *Table) Settle(id, pick string, move bool, now time.Time) Outcome {
	k := tableKey(id)
	t.mu.Lock()
	defer t.mu.Unlock()
	bound, ok := t.m.Get(k, now)
	switch {
	case !ok:
		if !t.m.Put(k, pick, now) {
			return Refused
		}
		return Bound
	case bound == pick:
		t.m.Put(k, pick, now)
		return Touched
	case move:
		t.m.Put(k, pick, now)
		return Rebound
	default:
		return Kept
	}
}

// Sweep deletes the bindings idle longer than the TTL and returns how many it deleted.
func (t *Table) Sweep(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m.Sweep(now)
}

// Len is the number of bindings held (expired ones count until swept).
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m.Len()
}
