// Package lru is a bounded set of strings that forgets the least recently touched first.
package lru

import (
	"container/list"
	"iter"
)

// Set holds at most its capacity of keys. It is not safe for concurrent use: its owner
// serialises access under its own lock.
type Set struct {
	capacity int
	order    *list.List // front = most recently touched
	items    map[string]*list.Element
}

// New is an empty set of at most capacity keys.
func New(capacity int) *Set {
	return &Set{capacity: capacity, order: list.New(), items: map[string]*list.Element{}}
}

// Touch makes k the most recent key, adding it if absent; past the capacity the least recent
// keys are forgotten.
func (s *Set) Touch(k string) {
	if e, ok := s.items[k]; ok {
		s.order.MoveToFront(e)
		return
	}
	s.items[k] = s.order.PushFront(k)
	for s.order.Len() > s.capacity {
		old := s.order.Back()
		s.order.Remove(old)
		delete(s.items, old.Value.(string))
	}
}

// Has reports whether k is held (without making it more recent).
func (s *Set) Has(k string) bool {
	_, ok := s.items[k]
	return ok
}

// Recent yields the keys from the most recently touched to the least.
func (s *Set) Recent() iter.Seq[string] {
	return func(yield func(string) bool) {
		for e := s.order.Front(); e != nil; e = e.Next() {
			if !yield(e.Value.(string)) {
				return
			}
		}
	}
}
