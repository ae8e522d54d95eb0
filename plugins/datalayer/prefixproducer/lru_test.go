package prefixproducer

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// blockLRU keeps the recency order, the evictions and the length of a pointer-linked LRU
// (hashicorp's simplelru, the index's LRU before) under the same random sequence of adds and
// purges, for capacities from one entry up.
func TestBlockLRUMatchesSimpleLRU(t *testing.T) {
	cases := []struct {
		name     string
		capacity int
		keys     int // adds draw from this many distinct hashes
		steps    int
	}{
		{name: "one entry", capacity: 1, keys: 3, steps: 200},
		{name: "mostly hits", capacity: 8, keys: 10, steps: 2000},
		{name: "mostly misses", capacity: 8, keys: 1000, steps: 2000},
		{name: "never full", capacity: 500, keys: 100, steps: 2000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, uint64(tc.capacity)))
			var gotEvicted, wantEvicted []blockHash
			got := newBlockLRU(tc.capacity, func(h blockHash) { gotEvicted = append(gotEvicted, h) })
			want, err := simplelru.NewLRU(tc.capacity, func(h blockHash, _ struct{}) { wantEvicted = append(wantEvicted, h) })
			if err != nil {
				t.Fatal(err)
			}
			for step := range tc.steps {
				if rng.IntN(500) == 0 {
					got.purge()
					want.Purge()
					slices.Sort(gotEvicted) // purge order is not part of the contract
					slices.Sort(wantEvicted)
				} else {
					h := blockHash(rng.IntN(tc.keys))
					got.add(h)
					want.Add(h, struct{}{})
				}
				wantOrder := want.Keys() // oldest first
				slices.Reverse(wantOrder)
				if !slices.Equal(got.recency(), wantOrder) || got.len() != want.Len() || !slices.Equal(gotEvicted, wantEvicted) {
					t.Fatalf("step %d: order %v want %v, len %d want %d, evicted %v want %v",
						step, got.recency(), wantOrder, got.len(), want.Len(), gotEvicted, wantEvicted)
				}
			}
		})
	}
}
