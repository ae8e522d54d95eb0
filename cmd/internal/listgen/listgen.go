// Package listgen yields a fixed list once, in order: a workload generator or an arrival
// source over requests made up front.
package listgen

// Gen yields its items in order; Next reports false after the last.
type Gen[T any] struct {
	items []T
	i     int
}

// New returns a Gen over items.
func New[T any](items []T) *Gen[T] { return &Gen[T]{items: items} }

// Next returns the next item, or false when none is left.
func (g *Gen[T]) Next() (T, bool) {
	if g.i >= len(g.items) {
		var zero T
		return zero, false
	}
	g.i++
	return g.items[g.i-1], true
}
