// Package ttltable is a bounded map whose entries expire a fixed time after their last write.
package ttltable

import "time"

type entry[V any] struct {
	v  V
	at time.Time
}

// Table holds at most its max keys. An entry written more than the TTL ago is gone for every
// reader at once (Get checks the age) but keeps its place until Sweep frees it. It is not safe
// for concurrent use: its owner serialises access under its own lock.
type Table[K comparable, V any] struct {
	ttl time.Duration
	max int
	m   map[K]entry[V]
}

// New is an empty table of at most maxKeys keys whose entries live ttl after their last write.
func New[K comparable, V any](ttl time.Duration, maxKeys int) *Table[K, V] {
	return &Table[K, V]{ttl: ttl, max: maxKeys, m: map[K]entry[V]{}}
}

// Get returns k's value unless it is absent or was last written more than the TTL before now.
func (t *Table[K, V]) Get(k K, now time.Time) (V, bool) {
	e, ok := t.m[k]
	if !ok || now.Sub(e.at) > t.ttl {
		var zero V
		return zero, false
	}
	return e.v, true
}

// Put writes v under k at now and reports whether it did: a key the table does not hold is
// refused while the table is full (an expired key still held is rewritten in place).
func (t *Table[K, V]) Put(k K, v V, now time.Time) bool {
	if _, held := t.m[k]; !held && len(t.m) >= t.max {
		return false
	}
	t.m[k] = entry[V]{v: v, at: now}
	return true
}

// Sweep deletes the entries last written more than the TTL before now and returns how many.
func (t *Table[K, V]) Sweep(now time.Time) int {
	n := 0
	for k, e := range t.m {
		if now.Sub(e.at) > t.ttl {
			delete(t.m, k)
			n++
		}
	}
	return n
}

// Len is the number of entries held, expired ones included until swept.
func (t *Table[K, V]) Len() int { return len(t.m) }
