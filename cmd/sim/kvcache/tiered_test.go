package kvcache

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/wire/kvevents"
)

// TestTieredMatch: a prefix the GPU evicted is still found whole in the CPU tier, the GPU's
// share is told apart, and a gap in both tiers ends the match.
func TestTieredMatch(t *testing.T) {
	tests := []struct {
		name           string
		cpu            bool
		hashes         []uint64
		onGPU, total   int
		peekAfterTotal int
	}{
		{"GPU only: the evicted head ends the match", false, []uint64{1, 2, 3, 4}, 0, 0, 0},
		{"CPU holds what the GPU evicted", true, []uint64{1, 2, 3, 4}, 0, 4, 4},
		{"GPU-held tail after a CPU-held head", true, []uint64{1, 2, 5, 6}, 0, 4, 4},
		{"a block neither tier holds ends it", true, []uint64{1, 2, 9, 5}, 0, 2, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tier := Tiered{GPU: NewPrefixCache(2)}
			if tc.cpu {
				tier.CPU = NewPrefixCache(16)
			}
			for _, hs := range [][]uint64{{1, 2, 3, 4}, {1, 2, 5, 6}} {
				tier.GPU.Insert(hs)
				if tier.CPU != nil {
					tier.CPU.Insert(hs)
				}
			}
			// the GPU (2 blocks) now holds 5 and 6 only
			if got := tier.Peek(tc.hashes); got != tc.total {
				t.Fatalf("Peek = %d, want %d", got, tc.total)
			}
			onGPU, total := tier.Match(tc.hashes)
			if onGPU != tc.onGPU || total != tc.total {
				t.Fatalf("Match = (%d, %d), want (%d, %d)", onGPU, total, tc.onGPU, tc.total)
			}
		})
	}
	tier := Tiered{GPU: NewPrefixCache(4), CPU: NewPrefixCache(4)}
	tier.GPU.Insert([]uint64{7, 8})
	tier.CPU.Insert([]uint64{7, 8})
	if onGPU, total := tier.Match([]uint64{7, 8, 10}); onGPU != 2 || total != 2 {
		t.Fatalf("both tiers holding a prefix: Match = (%d, %d), want (2, 2)", onGPU, total)
	}
}

// TestTieredMatchRefreshesTheCPUTier: a CPU hit keeps its blocks from being the next the CPU
// tier evicts, as a GPU hit does on the GPU.
func TestTieredMatchRefreshesTheCPUTier(t *testing.T) {
	tier := Tiered{GPU: NewPrefixCache(1), CPU: NewPrefixCache(3)}
	for _, h := range []uint64{1, 2, 3} {
		tier.GPU.Insert([]uint64{h})
		tier.CPU.Insert([]uint64{h})
	}
	tier.Match([]uint64{1}) // 1 was the CPU's oldest
	tier.CPU.Insert([]uint64{4})
	if tier.Peek([]uint64{1}) != 1 || tier.CPU.Peek([]uint64{2}) != 0 {
		t.Fatal("the CPU tier evicted the block a match had just used")
	}
}

// TestTierEventsNameTheMedium: the CPU tier's stores and evictions are published on medium
// "CPU", self-describing (tokens and parent), like the GPU's.
func TestTierEventsNameTheMedium(t *testing.T) {
	c := NewPrefixCache(2)
	tokens := []uint32{1, 2, 3, 4, 5, 6}
	hashes := BlockHashes(tokens, 2)
	events := TierEvents("CPU", c.InsertObserved(hashes), hashes, tokens, 2)
	if len(events) != 3 {
		t.Fatalf("%d events, want a store, an eviction and a store: %+v", len(events), events)
	}
	for _, ev := range events {
		if ev.Medium != "CPU" {
			t.Fatalf("event on medium %q, want CPU", ev.Medium)
		}
	}
	if last := events[2]; last.Kind != kvevents.KindStored || !last.HasParent || last.Parent != hashes[1] || len(last.Tokens) != 2 {
		t.Fatalf("the last store is not chained and self-describing: %+v", last)
	}
	if gpu := Events(c.InsertObserved(hashes[:1]), hashes, tokens, 2); len(gpu) == 0 || gpu[0].Medium != "GPU" {
		t.Fatalf("Events is no longer the GPU tier's: %+v", gpu)
	}
}
