package prefixproducer

import (
	"math/rand/v2"
	"testing"
)

// TestBlockTable runs random ref/get/del sequences against a Go map. The key sets make probe
// runs long (keys that share a home slot, so deletions must shift entries back across them and
// across the table's end) and include the zero hash, which marks free slots.
func TestBlockTable(t *testing.T) {
	tests := []struct {
		name string
		keys func(r *rand.Rand) blockHash
		ops  int
	}{
		{name: "random hashes, growing", keys: func(r *rand.Rand) blockHash { return blockHash(r.Uint64()) }, ops: 20000},
		{name: "few keys, many deletes", keys: func(r *rand.Rand) blockHash { return blockHash(r.IntN(40)) }, ops: 20000},
		{name: "small range with zero", keys: func(r *rand.Rand) blockHash { return blockHash(r.IntN(300)) }, ops: 50000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(7, 9))
			tab, ref := newBlockTable(), map[blockHash]slotBits{}
			var live []blockHash
			for op := range tt.ops {
				switch k := r.IntN(10); {
				case k < 5: // set
					h := tt.keys(r)
					v := slotBits{held: r.Uint64() | 1, given: r.Uint64()}
					*tab.ref(h) = v
					if _, ok := ref[h]; !ok {
						live = append(live, h)
					}
					ref[h] = v
				case k < 8 && len(live) > 0: // delete a present key
					i := r.IntN(len(live))
					h := live[i]
					live[i], live = live[len(live)-1], live[:len(live)-1]
					tab.del(h)
					delete(ref, h)
				default: // delete an absent key, or a present one
					h := tt.keys(r)
					if _, ok := ref[h]; ok {
						continue
					}
					tab.del(h)
				}
				if tab.len() != len(ref) {
					t.Fatalf("op %d: %d entries, want %d", op, tab.len(), len(ref))
				}
				if op%97 == 0 {
					for h, v := range ref {
						if got := tab.get(h); got != v {
							t.Fatalf("op %d: key %x holds %+v, want %+v", op, h, got, v)
						}
					}
					for range 20 {
						if h := tt.keys(r); tab.get(h) != ref[h] {
							t.Fatalf("op %d: key %x holds %+v, want %+v", op, h, tab.get(h), ref[h])
						}
					}
				}
			}
		})
	}
}
