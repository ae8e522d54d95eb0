package lru

import (
	"slices"
	"testing"
)

func TestSet(t *testing.T) {
	s := New(3)
	for _, k := range []string{"a", "b", "c", "a", "d"} { // a refreshed, so b is the oldest when d comes
		s.Touch(k)
	}
	if got, want := slices.Collect(s.Recent()), []string{"d", "a", "c"}; !slices.Equal(got, want) {
		t.Fatalf("Recent = %v, want %v", got, want)
	}
	if s.Has("b") || !s.Has("c") {
		t.Fatalf("Has(b) %v Has(c) %v: want the least recent forgotten, the rest kept", s.Has("b"), s.Has("c"))
	}
	if got := slices.Collect(s.Recent()); got[0] != "d" {
		t.Fatalf("Has moved a key: %v", got)
	}
	for k := range s.Recent() {
		if k != "d" {
			t.Fatalf("Recent went on after the consumer stopped at %q", k)
		}
		break
	}
}
