package kvevents

import (
	"fmt"
	"testing"

	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
)

// benchFleet is an index holding, for each of n endpoints, blocksPer blocks: a shared
// 32-block system prompt plus endpoint-specific conversations of 8 blocks of 16 tokens.
func benchFleet(n, blocksPer int) (*Index, []SourceKey, []uint32) {
	ix := NewIndex(IndexConfig{BlockSize: 16}, nil)
	system := seqTokens(1, 32*16)
	srcs := make([]SourceKey, n)
	for e := 0; e < n; e++ {
		srcs[e] = SourceKey{Endpoint: fmt.Sprintf("10.0.%d.%d:8000", e/250, e%250)}
		ix.Apply(srcs[e], []kvwire.Event{stored(system, 16, 1_000_000, 0, "GPU")})
		for c := 0; (c+1)*8 < blocksPer-32; c++ {
			base := uint64(e)<<32 | uint64(c)<<12
			ix.Apply(srcs[e], []kvwire.Event{stored(seqTokens(1_000_000+e*100_000+c*128, 8*16), 16, base, 1_000_032, "GPU")})
		}
	}
	// The request: the system prompt and one endpoint's conversation, then new text.
	prompt := append(append(append([]uint32{}, system...), seqTokens(1_000_000+7*100_000, 8*16)...), seqTokens(50_000_000, 64*16)...)
	return ix, srcs, prompt
}

// BenchmarkIndex records the index's cost per event (one BlockStored of one block and its
// BlockRemoved, decoded from msgpack and applied as a subscriber does; and the same for a
// prompt's 192 blocks in one event, ns/block) and per lookup (one
// request of 104 blocks against every endpoint) at 64 and 512 endpoints of 1024 blocks each,
// next to a baseline measured in the same run: computing the request's keys, which any prefix
// scorer must do. The event and lookup sub-benchmarks report their ratio to the baseline.
//
//	go test -run '^$' -bench BenchmarkIndex ./plugins/precise/kvevents/
func BenchmarkIndex(b *testing.B) {
	for _, n := range []int{64, 512} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			ix, srcs, prompt := benchFleet(n, 1024)
			keys := ix.Keyer().RequestKeys(nil, "", prompt, "", 0)
			storedEv, _ := kvwire.EncodeBatch(kvwire.Batch{Events: []kvwire.Event{stored(seqTokens(900_000_000, 16), 16, 1<<60, 0, "GPU")}}, kvwire.FormatMap)
			removedEv, _ := kvwire.EncodeBatch(kvwire.Batch{Events: []kvwire.Event{{Kind: kvwire.KindRemoved, Hashes: []uint64{1<<60 + 1}, Medium: "GPU"}}}, kvwire.FormatMap)
			var baseline float64
			b.Run("keys-baseline", func(b *testing.B) {
				b.ReportAllocs()
				dst := make([]uint64, 0, len(keys))
				for i := 0; i < b.N; i++ {
					dst = ix.Keyer().RequestKeys(dst[:0], "", prompt, "", 0)
				}
				baseline = float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			})
			// storeAndRemove decodes and applies stored then removed on one endpoint's stream, as
			// a subscriber does, and reports (and returns) the time per event.
			storeAndRemove := func(b *testing.B, stored, removed []byte) (perEvent float64) {
				b.ReportAllocs()
				src := srcs[n/2]
				for i := 0; i < b.N; i++ {
					s, _ := kvwire.DecodeBatch(stored)
					ix.Apply(src, s.Events)
					r, _ := kvwire.DecodeBatch(removed)
					ix.Apply(src, r.Events)
				}
				perEvent = float64(b.Elapsed().Nanoseconds()) / float64(2*b.N)
				b.ReportMetric(perEvent, "ns/event")
				b.ReportMetric(perEvent/baseline, "x-keys-baseline")
				return perEvent
			}
			b.Run("event", func(b *testing.B) { storeAndRemove(b, storedEv, removedEv) })
			// A prompt's worth: a 3,072-token prompt stored in one BlockStored of 192 blocks
			// (token ids included, as vLLM sends them) and removed in one BlockRemoved, the
			// events an engine publishes for one request's prefill and its eviction.
			promptHashes := make([]uint64, 192)
			for i := range promptHashes {
				promptHashes[i] = 1<<61 + uint64(i) + 1
			}
			promptStored, _ := kvwire.EncodeBatch(kvwire.Batch{Events: []kvwire.Event{stored(seqTokens(800_000_000, 192*16), 16, 1<<61, 0, "GPU")}}, kvwire.FormatMap)
			promptRemoved, _ := kvwire.EncodeBatch(kvwire.Batch{Events: []kvwire.Event{{Kind: kvwire.KindRemoved, Hashes: promptHashes, Medium: "GPU"}}}, kvwire.FormatMap)
			b.Run("event-192-blocks", func(b *testing.B) {
				b.ReportMetric(storeAndRemove(b, promptStored, promptRemoved)/192, "ns/block")
			})
			b.Run("lookup", func(b *testing.B) {
				b.ReportAllocs()
				for i := 0; i < b.N; i++ {
					m := ix.Lookup(keys, srcs)
					if m[7].Blocks != 40 {
						b.Fatalf("endpoint 7 matched %d blocks, want 40", m[7].Blocks)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/baseline, "x-keys-baseline")
			})
			blocks, _ := ix.Size()
			b.Logf("%d endpoints, %d blocks indexed", n, blocks)
		})
	}
}
