package prefillscorer

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestPrefixTableEvictionIsAmortised fills a table with prompts larger than half its
// capacity's worth of blocks in total and checks that eviction keeps it bounded, keeps the
// newest prompts matchable, drops the oldest, and scans the table only about once per
// maxBlocks/2 inserted hashes (it used to scan on every Add once the table was full).
func TestPrefixTableEvictionIsAmortised(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		capacity, blocks, add int
	}{
		{name: "many small prompts", capacity: 1000, blocks: 10, add: 2000},
		{name: "large prompts", capacity: 1000, blocks: 300, add: 60},
		{name: "prompt over half the capacity", capacity: 1000, blocks: 700, add: 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pt := NewPrefixTable(4, tc.capacity)
			var prompts [][]uint64
			for i := 0; i < tc.add; i++ {
				h := make([]uint64, tc.blocks)
				for j := range h {
					h[j] = uint64(i)<<20 | uint64(j) + 1
				}
				prompts = append(prompts, h)
				pt.Add(fmt.Sprintf("pod-%d", i%8), h)
				if len(pt.pods) > tc.capacity {
					t.Fatalf("after add %d: %d hashes, capacity %d", i, len(pt.pods), tc.capacity)
				}
			}
			inserted := tc.add * tc.blocks
			// One scan per maxBlocks/2 new hashes, plus one per Add when a single prompt is over
			// half the capacity (it cannot share the table with anything else).
			maxScans := inserted/(tc.capacity/2) + 1
			if tc.blocks > tc.capacity/2 {
				maxScans = tc.add
			}
			if pt.evictions > maxScans {
				t.Fatalf("%d eviction scans for %d inserted hashes, want <= %d", pt.evictions, inserted, maxScans)
			}
			last := prompts[len(prompts)-1]
			if m := pt.Match(last); m[fmt.Sprintf("pod-%d", (tc.add-1)%8)] != 100 {
				t.Fatalf("newest prompt not fully matched: %v", m)
			}
			if inserted > tc.capacity {
				if m := pt.Match(prompts[0]); len(m) != 0 {
					t.Fatalf("oldest prompt still matched after %d hashes: %v", inserted, m)
				}
			}
		})
	}
}

// hashesReference is the block hash chain spelled out: xxhash of the previous hash (little
// endian) followed by the block's runes as a string.
func hashesReference(blockSize int, prompt string) []uint64 {
	runes := []rune(prompt)
	var out []uint64
	var prev uint64
	for i := 0; i+blockSize <= len(runes); i += blockSize {
		b := binary.LittleEndian.AppendUint64(nil, prev)
		prev = xxhash.Sum64(append(b, string(runes[i:i+blockSize])...))
		out = append(out, prev)
	}
	return out
}

func TestHashesAgreeWithReference(t *testing.T) {
	for _, prompt := range []string{"", "abc", "abcd", "hello world, a longer prompt!", "héllo wörld ✓ 日本語テキスト", "bad \xff\xfe utf8 \xc3"} {
		for _, bs := range []int{1, 4, 7} {
			got, want := NewPrefixTable(bs, 10).Hashes(prompt), hashesReference(bs, prompt)
			if len(got) != len(want) {
				t.Fatalf("%q/%d: %d hashes, want %d", prompt, bs, len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%q/%d: hash %d differs", prompt, bs, i)
				}
			}
		}
	}
}

func TestForgetDropsOnlyThatPod(t *testing.T) {
	pt := NewPrefixTable(4, 100)
	h := pt.Hashes("abcdefgh")
	pt.Add("a", h)
	pt.Add("b", h[:1])
	pt.Forget("a")
	if m := pt.Match(h); len(m) != 1 || m["b"] != 50 {
		t.Fatalf("after Forget(a): %v", m)
	}
	if _, a := pt.holders["a"]; len(pt.pods) != 1 || a || pt.holders["b"] == 0 {
		t.Fatalf("entries %v holders %v", pt.pods, pt.holders)
	}
}
