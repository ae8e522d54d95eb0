package prefillpolicy

import (
	"fmt"
	"strings"
	"testing"
)

// distinctBlocks returns a prompt of the given blocks of 4 ASCII characters, block j spelling
// first+j in base 64: blocks with different numbers differ.
func distinctBlocks(first, blocks int) string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ+/"
	var b strings.Builder
	for j := range blocks {
		v := first + j
		for range 4 {
			b.WriteByte(digits[v%64])
			v /= 64
		}
	}
	return b.String()
}

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
			var prompts []Prompt
			for i := 0; i < tc.add; i++ {
				p := pt.Prompt(distinctBlocks(i*tc.blocks, tc.blocks))
				prompts = append(prompts, p)
				pt.Add(fmt.Sprintf("pod-%d", i%8), p)
				if pt.Len() > tc.capacity {
					t.Fatalf("after add %d: %d entries, capacity %d", i, pt.Len(), tc.capacity)
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
					t.Fatalf("oldest prompt still matched after %d entries: %v", inserted, m)
				}
			}
		})
	}
}

func TestForgetDropsOnlyThatPod(t *testing.T) {
	pt := NewPrefixTable(4, 100)
	h := pt.Prompt("abcdefgh")
	pt.Add("a", h)
	pt.Add("b", pt.Prompt("abcd"))
	pt.Forget("a")
	if m := pt.Match(h); len(m) != 1 || m["b"] != 50 {
		t.Fatalf("after Forget(a): %v", m)
	}
	if _, a := pt.ids["a"]; a || len(pt.holders) != 1 || len(pt.retired) != 1 {
		t.Fatalf("ids %v holders %v retired %v", pt.ids, pt.holders, pt.retired)
	}
	// a's id is not reused while a's entries are still in the table: a new pod must not
	// inherit them.
	other := pt.Prompt("efghefgh")
	pt.Add("c", other)
	if m := pt.Match(h); len(m) != 1 || m["b"] != 50 {
		t.Fatalf("after Add(c): %v", m)
	}
	if pt.ids["c"] == 0 {
		t.Fatal("c took a's id while a's entries remain")
	}
	// Once a's generation is dropped its id is free again, with nothing left under it.
	for i := range 60 {
		pt.Add("d", pt.Prompt(distinctBlocks(1000+2*i, 2)))
	}
	if len(pt.retired) != 0 {
		t.Fatalf("a's id still retired after its generation was dropped: %v", pt.retired)
	}
	pt.Add("e", other)
	if m := pt.Match(h); len(m) != 0 {
		t.Fatalf("a new pod inherited entries: %v", m)
	}
}

// Pods whose entries all went with a dropped generation are forgotten and their ids reused,
// so a pool whose pods are replaced over time does not grow the table's pod index.
func TestPrefixTablePrunesPodsOfDroppedGenerations(t *testing.T) {
	pt := NewPrefixTable(4, 40)
	for i := range 1000 {
		pt.Add(fmt.Sprintf("pod-%d", i), pt.Prompt(distinctBlocks(i*5, 5))) // a new pod every time
	}
	if len(pt.names) > 10 || len(pt.holders) > 8 || len(pt.ids) != len(pt.holders) {
		t.Fatalf("pod index grew: %d names, %d holders, %d ids", len(pt.names), len(pt.holders), len(pt.ids))
	}
	if m := pt.Match(pt.Prompt(distinctBlocks(999*5, 1))); m["pod-999"] != 100 || len(m) != 1 {
		t.Fatalf("newest pod: %v", m)
	}
}
