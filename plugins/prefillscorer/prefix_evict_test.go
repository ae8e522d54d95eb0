package prefillscorer

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestPrefixTableEviction fills a table with many times its capacity and checks that eviction
// keeps it bounded, keeps the newest half of the capacity matchable (every prompt that fits in
// it), drops the oldest, rotates generations at most once per Add, and forgets the pods whose
// entries are all gone.
func TestPrefixTableEviction(t *testing.T) {
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
				if pt.Len() > tc.capacity {
					t.Fatalf("after add %d: %d hashes, capacity %d", i, pt.Len(), tc.capacity)
				}
			}
			inserted := tc.add * tc.blocks
			if pt.rotations > tc.add || pt.rotations < inserted/tc.capacity {
				t.Fatalf("%d rotations for %d adds of %d blocks", pt.rotations, tc.add, tc.blocks)
			}
			// The newest prompts that fit in half the capacity all stay whole.
			keep := max(1, (tc.capacity/2-tc.blocks+1)/tc.blocks)
			for i := len(prompts) - keep; i < len(prompts); i++ {
				if m := pt.Match(prompts[i]); m[fmt.Sprintf("pod-%d", i%8)] != 100 {
					t.Fatalf("prompt %d of %d (one of the newest %d) not fully matched: %v", i, len(prompts), keep, m)
				}
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
	if _, a := pt.ids["a"]; a || len(pt.holders) != 1 || len(pt.retired) != 1 {
		t.Fatalf("ids %v holders %v retired %v", pt.ids, pt.holders, pt.retired)
	}
	// a's id is not reused while a's entries are still in the table: a new pod must not
	// inherit them.
	pt.Add("c", h[1:])
	if m := pt.Match(h); len(m) != 1 || m["b"] != 50 {
		t.Fatalf("after Add(c): %v", m)
	}
	if pt.ids["c"] == 0 {
		t.Fatal("c took a's id while a's entries remain")
	}
	// Once a's generation is dropped its id is free again, with nothing left under it.
	for i := range 60 {
		pt.Add("d", []uint64{uint64(1000 + i), uint64(2000 + i)})
	}
	if len(pt.retired) != 0 {
		t.Fatalf("a's id still retired after its generation was dropped: %v", pt.retired)
	}
	pt.Add("e", h[1:])
	if m := pt.Match(h); len(m) != 0 {
		t.Fatalf("a new pod inherited entries: %v", m)
	}
}

// Pods whose entries all went with a dropped generation are forgotten and their ids reused,
// so a pool whose pods are replaced over time does not grow the table's pod index.
func TestPrefixTablePrunesPodsOfDroppedGenerations(t *testing.T) {
	pt := NewPrefixTable(4, 40)
	for i := range 1000 {
		h := make([]uint64, 5)
		for j := range h {
			h[j] = uint64(i)<<8 | uint64(j) + 1
		}
		pt.Add(fmt.Sprintf("pod-%d", i), h) // a new pod every time
	}
	if len(pt.names) > 10 || len(pt.holders) > 8 || len(pt.ids) != len(pt.holders) {
		t.Fatalf("pod index grew: %d names, %d holders, %d ids", len(pt.names), len(pt.holders), len(pt.ids))
	}
	if m := pt.Match([]uint64{999<<8 | 1}); m["pod-999"] != 100 || len(m) != 1 {
		t.Fatalf("newest pod: %v", m)
	}
}
