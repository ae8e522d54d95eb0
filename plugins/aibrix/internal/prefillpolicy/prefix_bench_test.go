package prefillpolicy

import (
	"fmt"
	"math/rand"
	"runtime"
	"testing"
)

// prefixBenchPrompts returns a function building distinct ASCII prompts of the given size: a
// random text whose first 16 bytes carry the request number, so every prompt differs from the
// first block on (as pdgate-bench epp's distinct prompts do; a chained hash then differs at
// every block).
func prefixBenchPrompts(size int) func(i int) string {
	rng := rand.New(rand.NewSource(1))
	base := make([]byte, size)
	for i := range base {
		base[i] = byte(' ' + rng.Intn(95))
	}
	return func(i int) string {
		copy(base, fmt.Sprintf("%016x", i))
		return string(base)
	}
}

// BenchmarkPrefixTable220KB is aibrix-pd-pair's per-request prefix work on distinct 220 KB
// prompts: prepare the prompt, match it, record it for one of 16 pods, at the default
// capacity (2^20 entries, so generations rotate every ~9 prompts). "trie" is PrefixTable,
// "hashchain" the table it replaced (prefix_ref_test.go); compare their ns/op in one run.
// heap-B is the live heap after the run (table full, prompts gone).
func BenchmarkPrefixTable220KB(b *testing.B) {
	const size, pods, capacity = 220 << 10, 16, 1 << 20
	podNames := make([]string, pods)
	for i := range podNames {
		podNames[i] = fmt.Sprintf("ns/prefill-%d", i)
	}
	for _, impl := range []string{"trie", "hashchain"} {
		b.Run(impl, func(b *testing.B) {
			// A ring of distinct prompts, each one back long after the table dropped it (it holds
			// ~19), so every request records a prompt the table does not hold.
			gen := prefixBenchPrompts(size)
			ring := make([]string, 64)
			for i := range ring {
				ring[i] = gen(i)
			}
			var request func(i int, p string)
			var keep any
			switch impl {
			case "trie":
				pt := NewPrefixTable(4, capacity)
				keep = pt
				request = func(i int, p string) {
					k := pt.Prompt(p)
					_ = pt.Match(k)
					pt.Add(podNames[i%pods], k)
				}
			default:
				pt := newRefTable(4, capacity)
				keep = pt
				request = func(i int, p string) {
					h := pt.Hashes(p)
					_ = pt.Match(h)
					pt.Add(podNames[i%pods], h)
				}
			}
			before := liveHeap()
			// Fill the table past its first rotations, so every run measures steady state.
			for i := range 40 {
				request(i, ring[i%len(ring)])
			}
			b.ResetTimer()
			for i := range b.N {
				request(i, ring[(40+i)%len(ring)])
			}
			b.StopTimer()
			b.ReportMetric(float64(liveHeap()-before), "heap-B")
			runtime.KeepAlive(keep)
			runtime.KeepAlive(ring)
		})
	}
}

func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// TestPrefixTableHeap checks that a full table at the default capacity stays within the
// hash-chain table's ~10 MB on distinct 220 KB prompts and on short (64-block) ones.
func TestPrefixTableHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("fills two 2^20-entry tables")
	}
	for _, size := range []int{220 << 10, 256} {
		prompt := prefixBenchPrompts(size)
		before := liveHeap()
		pt := NewPrefixTable(4, 1<<20)
		for i := range 2 * (1 << 20) / (size / 4) {
			pt.Add(fmt.Sprintf("pod-%d", i%16), pt.Prompt(prompt(i)))
		}
		trie := liveHeap() - before
		runtime.KeepAlive(pt)
		pt = nil
		before = liveHeap()
		ref := newRefTable(4, 1<<20)
		for i := range 2 * (1 << 20) / (size / 4) {
			ref.Add(fmt.Sprintf("pod-%d", i%16), ref.Hashes(prompt(i)))
		}
		hashchain := liveHeap() - before
		runtime.KeepAlive(ref)
		t.Logf("%d-byte prompts: trie %.1f MB (%d entries), hash chain %.1f MB (%d entries)",
			size, float64(trie)/1e6, ref.Len(), float64(hashchain)/1e6, ref.Len())
		if trie > 10<<20 || trie > hashchain {
			t.Errorf("%d-byte prompts: trie holds %d bytes, hash chain %d", size, trie, hashchain)
		}
	}
}
