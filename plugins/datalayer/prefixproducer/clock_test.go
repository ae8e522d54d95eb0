package prefixproducer

import (
	"cmp"
	"slices"
	"testing"
)

func TestBlockClockRing(t *testing.T) {
	c := newBlockClock(1000)
	var want []blockHash
	// Push and pop across the ring's wrap and two growths: the order stays oldest first.
	for i := range 300 {
		c.push(clockEntry{hash: blockHash(i), weight: 1})
		want = append(want, blockHash(i))
		if i%3 == 0 {
			if got := c.pop().hash; got != want[0] {
				t.Fatalf("step %d: popped %d, want %d", i, got, want[0])
			}
			want = want[1:]
		}
	}
	var got []blockHash
	c.each(func(e clockEntry) { got = append(got, e.hash) })
	if !slices.Equal(got, want) || c.n != len(want) || c.used != len(want) {
		t.Fatalf("entries %v (n %d used %d), want %v", got, c.n, c.used, want)
	}
	c.reset()
	if c.n != 0 || c.used != 0 {
		t.Fatalf("reset left n %d used %d", c.n, c.used)
	}
}

// held lists, for each prompt, the blocks of it the index says s holds.
func held(x *index, s serverID, prompts ...[]blockHash) [][]blockHash {
	var out [][]blockHash
	for _, p := range prompts {
		var h []blockHash
		for _, b := range p {
			if x.words[0].get(b).held != 0 {
				h = append(h, b)
			}
		}
		out = append(out, h)
	}
	return out
}

func TestIndexEviction(t *testing.T) {
	s := serverID{Namespace: "ns", Name: "pod"}
	for _, tc := range []struct {
		name     string
		capacity int
		adds     [][]blockHash
		want     []blockHash // blocks held at the end
		recorded int         // entries in the record, when not len(want)
	}{
		{name: "oldest prompt goes first", capacity: 4,
			adds: [][]blockHash{{1, 2}, {3, 4}, {5, 6}}, want: []blockHash{3, 4, 5, 6}},
		{name: "tail before head", capacity: 3,
			adds: [][]blockHash{{1, 2, 3}, {9}}, want: []blockHash{1, 2, 9}},
		{name: "a block given again outlives one pass", capacity: 4,
			adds: [][]blockHash{{1, 2}, {3, 4}, {1}, {5, 6}}, want: []blockHash{1, 3, 5, 6}},
		{name: "second chance is spent once", capacity: 4,
			adds: [][]blockHash{{1, 2}, {3, 4}, {1}, {5, 6}, {7, 8}, {10}, {9}}, want: []blockHash{7, 8, 9, 10}},
		{name: "never full", capacity: 100,
			adds: [][]blockHash{{1, 2}, {3, 4}, {1, 2}}, want: []blockHash{1, 2, 3, 4}},
		{name: "one prompt longer than the capacity names the server in every block, as in GIE", capacity: 2,
			adds: [][]blockHash{{1, 2, 3, 4, 5}}, want: []blockHash{1, 2, 3, 4, 5}, recorded: 2},
		{name: "a longer prompt after a full record drops the old blocks and names the server in its own", capacity: 3,
			adds: [][]blockHash{{8, 9, 10}, {1, 2, 3, 4, 5}}, want: []blockHash{1, 2, 3, 4, 5}, recorded: 3},
		{name: "a prompt that fits evicts only older blocks", capacity: 4,
			adds: [][]blockHash{{8, 9}, {10}, {1, 2, 3}}, want: []blockHash{1, 2, 3, 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newIndex(tc.capacity)
			for _, a := range tc.adds {
				x.add(a, s, 0, false)
			}
			all := []blockHash{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
			if got := held(x, s, all)[0]; !slices.Equal(got, tc.want) {
				t.Fatalf("held %v, want %v", got, tc.want)
			}
			if want := cmp.Or(tc.recorded, len(tc.want)); x.size() != want {
				t.Fatalf("size %d, want %d", x.size(), want)
			}
		})
	}
}

// A checkpoint's weight counts against the capacity, and one entry heavier than the capacity
// stays alone rather than emptying the server.
func TestIndexWeights(t *testing.T) {
	s := serverID{Namespace: "ns", Name: "pod"}
	x := newIndex(300)
	x.add(make([]blockHash, 0), s, 0, false)
	l := x.servers[s]
	l.clock.push(clockEntry{hash: 1, weight: 200})
	*x.words[0].ref(1) = slotBits{held: 1}
	l.clock.push(clockEntry{hash: 2, weight: 200})
	*x.words[0].ref(2) = slotBits{held: 1}
	for l.clock.over() {
		evictOldest(l.clock, x.words[0], 1)
	}
	if got := held(x, s, []blockHash{1, 2})[0]; !slices.Equal(got, []blockHash{2}) || l.clock.used != 200 {
		t.Fatalf("held %v used %d, want [2] 200", got, l.clock.used)
	}
	l.clock.push(clockEntry{hash: 3, weight: 900})
	*x.words[0].ref(3) = slotBits{held: 1}
	for l.clock.over() {
		evictOldest(l.clock, x.words[0], 1)
	}
	if got := held(x, s, []blockHash{1, 2, 3})[0]; !slices.Equal(got, []blockHash{3}) {
		t.Fatalf("held %v, want the heavy entry alone", got)
	}
}

func TestIndexRemovePod(t *testing.T) {
	a, b := serverID{Namespace: "ns", Name: "a"}, serverID{Namespace: "ns", Name: "b"}
	x := newIndex(10)
	x.add([]blockHash{1, 2, 3}, a, 0, false)
	x.add([]blockHash{1, 2}, b, 0, false)
	x.add([]blockHash{1}, a, 0, false) // a block given again: its second-chance bit must go too
	x.removePod(a)
	if got := x.matchLongestPrefix([]blockHash{1, 2, 3}); len(got) != 1 || got[b] != 2 {
		t.Fatalf("after removing a: %v, want only b with 2", got)
	}
	if x.words[0].len() != 2 {
		t.Fatalf("%d entries left, want 2 (b's)", x.words[0].len())
	}
	x.removePod(b)
	if x.words[0].len() != 0 || x.size() != 0 {
		t.Fatalf("entries left after removing every pod: %v", x.words[0])
	}
}
