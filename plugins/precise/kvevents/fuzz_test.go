package kvevents

import (
	"testing"

	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
)

// encodeSeed lays b out as vLLM does, so the fuzzer starts from what engines really send.
func encodeSeed(f *testing.F, b kvwire.Batch, format kvwire.EventFormat) []byte {
	f.Helper()
	data, err := kvwire.EncodeBatch(b, format)
	if err != nil {
		f.Fatal(err)
	}
	return data
}

// FuzzHostileStream: whatever a publisher sends, decoding and applying it to a bounded index
// neither panics nor grows the index past its bounds.
func FuzzHostileStream(f *testing.F) {
	f.Add(encodeSeed(f, kvwire.Batch{TS: 1, HasRank: true, Events: []kvwire.Event{
		{Kind: kvwire.KindStored, Hashes: []uint64{1, 2}, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2, Medium: "GPU"}}}, kvwire.FormatArray), uint8(0))
	f.Add(encodeSeed(f, kvwire.Batch{TS: 1, DPRank: 1, HasRank: true, Events: []kvwire.Event{
		{Kind: kvwire.KindStored, Hashes: []uint64{3}, Parent: 2, HasParent: true, Tokens: []uint32{5, 6}, BlockSize: 2, Medium: "CPU"}}}, kvwire.FormatMap), uint8(1))
	f.Add(encodeSeed(f, kvwire.Batch{TS: 1, HasRank: true, Events: []kvwire.Event{
		{Kind: kvwire.KindRemoved, Hashes: []uint64{1}, Medium: "GPU"}, {Kind: kvwire.KindCleared}}}, kvwire.FormatArray), uint8(2))
	f.Fuzz(func(t *testing.T, data []byte, src uint8) {
		ix := NewIndex(IndexConfig{BlockSize: 2, MaxKeys: 64, MaxBlocksPerEndpoint: 32}, nil)
		b, err := kvwire.DecodeBatch(data)
		if err != nil {
			return
		}
		for i := 0; i < 3; i++ { // the same batch repeatedly, from a few sources
			ix.Apply(SourceKey{Endpoint: "e", Rank: int(src%4) + i}, b.Events)
		}
		blocks, keys := ix.Size()
		if blocks > 3*32 || keys > 64+3*32 {
			t.Fatalf("index past its bounds: %d blocks, %d keys", blocks, keys)
		}
		ix.Lookup(ix.Keyer().RequestKeys(nil, "", []uint32{1, 2, 3, 4}, "", 0), []SourceKey{{Endpoint: "e"}})
	})
}
