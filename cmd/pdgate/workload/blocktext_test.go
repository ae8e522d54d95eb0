package workload

import (
	"strings"
	"testing"
)

func keys(salt uint64, ids ...uint64) []BlockKey {
	return MooncakeRow{HashIDs: ids}.Keys(salt, nil)
}

func TestBlockTextPrefixes(t *testing.T) {
	bt := NewBlockText(0)
	for _, tc := range []struct {
		name           string
		a, b           []BlockKey
		ta, tb, shared int // tokens of a and b; bytes the two texts must share
	}{
		{"equal ids, equal prefix", keys(0, 0, 1, 2), keys(0, 0, 1, 3), 1536, 1300, 2 * BlockBytes},
		{"longer prompt extends the shorter", keys(0, 0, 1), keys(0, 0, 1, 2), 1024, 1500, 2 * BlockBytes},
		{"partial last block is the full block's start", keys(0, 5, 6), keys(0, 5, 6, 7), 700, 1536, 700 * BytesPerToken},
		{"different first id", keys(0, 1, 2), keys(0, 2, 2), 1024, 1024, 0},
		{"salt changes the text", keys(0, 1, 2), keys(3, 1, 2), 1024, 1024, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := bt.Prompt(tc.a, tc.ta), bt.Prompt(tc.b, tc.tb)
			if len(a) != tc.ta*BytesPerToken || len(b) != tc.tb*BytesPerToken {
				t.Fatalf("lengths %d, %d; want %d, %d", len(a), len(b), tc.ta*BytesPerToken, tc.tb*BytesPerToken)
			}
			common := 0
			for common < min(len(a), len(b)) && a[common] == b[common] {
				common++
			}
			// past the shared blocks the texts differ within the next block's header
			// ("#<id>[/<salt>] ", at most 42 bytes), or one text ends
			if common < tc.shared || common >= tc.shared+42 || (common == min(len(a), len(b))) != (tc.shared == min(len(a), len(b))) {
				t.Fatalf("texts share %d bytes, want %d", common, tc.shared)
			}
		})
	}
}

// Different ids never share a block's text; a block is the same across instances and caches.
func TestBlockTextDeterministicAndDistinct(t *testing.T) {
	small, big := NewBlockText(2), NewBlockText(1000)
	seen := map[string]BlockKey{}
	for id := uint64(0); id < 300; id++ {
		for _, salt := range []uint64{0, 1} {
			k := BlockKey{ID: id, Salt: salt}
			s := small.Block(k)
			if len(s) != BlockBytes {
				t.Fatalf("block %v: %d bytes", k, len(s))
			}
			if o, dup := seen[s]; dup {
				t.Fatalf("blocks %v and %v have the same text", o, k)
			}
			seen[s] = k
			if big.Block(k) != s {
				t.Fatalf("block %v differs between instances", k)
			}
		}
	}
	if got := small.Block(BlockKey{ID: 7}); !strings.HasPrefix(got, "#7 ") || got != makeBlock(BlockKey{ID: 7}) {
		t.Fatalf("block 7 starts %q", got[:16])
	}
}

func TestBlockTextCacheIsBounded(t *testing.T) {
	bt := NewBlockText(3)
	for _, id := range []uint64{1, 2, 3, 1, 2, 3, 4, 1} {
		bt.Block(BlockKey{ID: id})
	}
	// 1, 2, 3 made; three hits; 4 evicts 1 (the oldest); 1 made again
	if bt.Made != 5 || bt.Hits != 3 || len(bt.cache) != 3 {
		t.Fatalf("made %d, hits %d, cached %d; want 5, 3, 3", bt.Made, bt.Hits, len(bt.cache))
	}
}

func TestKeysKeepSharedIDs(t *testing.T) {
	got := MooncakeRow{HashIDs: []uint64{0, 9}}.Keys(4, map[uint64]bool{0: true})
	if got[0] != (BlockKey{ID: 0}) || got[1] != (BlockKey{ID: 9, Salt: 4}) {
		t.Fatalf("keys %v", got)
	}
}

func BenchmarkMooncakePrompt(b *testing.B) {
	bt := NewBlockText(0)
	ks := keys(0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		ks[len(ks)-1].Salt = uint64(i) // one new block per prompt, the rest cached
		_ = bt.Prompt(ks, 12035)
	}
}
