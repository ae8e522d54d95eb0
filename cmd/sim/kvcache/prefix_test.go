package kvcache

import "testing"

func toks(n int, base uint32) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = base + uint32(i)
	}
	return out
}

func TestBlockHashesChain(t *testing.T) {
	a := toks(64, 0)
	b := append(toks(32, 0), toks(32, 1000)...)
	ha, hb := BlockHashes(a, 16), BlockHashes(b, 16)
	if len(ha) != 4 || len(hb) != 4 {
		t.Fatalf("want 4 full blocks, got %d and %d", len(ha), len(hb))
	}
	for i := 0; i < 2; i++ {
		if ha[i] != hb[i] {
			t.Fatalf("shared prefix block %d hashes differ", i)
		}
	}
	if ha[2] == hb[2] || ha[3] == hb[3] {
		t.Fatal("diverging blocks hash equal")
	}
	// the same block content after a different prefix hashes differently (chained)
	c := append(toks(16, 500), toks(16, 16)...)
	if BlockHashes(c, 16)[1] == ha[1] {
		t.Fatal("block hash ignores its prefix")
	}
	if got := len(BlockHashes(toks(15, 0), 16)); got != 0 {
		t.Fatalf("partial block hashed: %d", got)
	}
}

func TestPrefixCacheMatchAndEvict(t *testing.T) {
	tests := []struct {
		name      string
		capacity  int
		inserts   [][]uint64
		query     []uint64
		wantMatch int
	}{
		{"empty", 4, nil, []uint64{1, 2}, 0},
		{"full prefix", 4, [][]uint64{{1, 2, 3}}, []uint64{1, 2, 3, 4}, 3},
		{"gap stops the match", 4, [][]uint64{{1, 3}}, []uint64{1, 2, 3}, 1},
		{"lru evicts the oldest prefix tail first", 3, [][]uint64{{1, 2, 3}, {9}}, []uint64{1, 2, 3}, 2},
		{"zero capacity caches nothing", 0, [][]uint64{{1}}, []uint64{1}, 0},
	}
	for _, tc := range tests {
		c := NewPrefixCache(tc.capacity)
		for _, ins := range tc.inserts {
			c.Insert(ins)
		}
		if got := c.Match(tc.query); got != tc.wantMatch {
			t.Errorf("%s: match %d, want %d", tc.name, got, tc.wantMatch)
		}
		if c.Len() > tc.capacity {
			t.Errorf("%s: %d blocks over capacity %d", tc.name, c.Len(), tc.capacity)
		}
	}
}

func TestPrefixCacheMatchRefreshes(t *testing.T) {
	c := NewPrefixCache(4)
	c.Insert([]uint64{1, 2})
	c.Insert([]uint64{5, 6})
	c.Match([]uint64{1, 2}) // 1, 2 are now the most recent; 6 is the oldest
	c.Insert([]uint64{7})
	if c.Match([]uint64{1, 2}) != 2 {
		t.Fatal("recently matched blocks were evicted")
	}
	if c.Match([]uint64{5, 6}) != 1 {
		t.Fatal("least recently used block survived")
	}
}

// A prefix loses its tail first: evicting its head would leave the rest cached and unmatchable.
func TestPrefixCacheEvictsTailFirst(t *testing.T) {
	for _, tc := range []struct {
		name  string
		touch func(c *PrefixCache)
	}{
		{"after insert", func(*PrefixCache) {}},
		{"after match", func(c *PrefixCache) { c.Match([]uint64{1, 2, 3}) }},
		{"after observed insert", func(c *PrefixCache) { c.InsertObserved([]uint64{1, 2, 3}) }},
	} {
		c := NewPrefixCache(3)
		c.Insert([]uint64{1, 2, 3})
		tc.touch(c)
		c.Insert([]uint64{9})
		if got := c.Peek([]uint64{1, 2, 3}); got != 2 {
			t.Errorf("%s: %d leading blocks survive one eviction, want 2", tc.name, got)
		}
	}
}

func TestPrefixCachePeekChangesNothing(t *testing.T) {
	c := NewPrefixCache(2)
	c.Insert([]uint64{1})
	c.Insert([]uint64{2})
	if c.Peek([]uint64{1}) != 1 {
		t.Fatal("peek missed a cached block")
	}
	c.Insert([]uint64{3}) // 1 is still the oldest: a peek does not refresh it
	if c.Peek([]uint64{1}) != 0 || c.Peek([]uint64{2}) != 1 {
		t.Fatal("peek refreshed the block it looked at")
	}
}
