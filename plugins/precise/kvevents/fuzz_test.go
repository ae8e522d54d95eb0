package kvevents

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"

	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
)

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// FuzzHostileStream: whatever a publisher sends, decoding and applying it to a bounded index
// neither panics nor grows the index past its bounds.
func FuzzHostileStream(f *testing.F) {
	f.Add(mustMarshal(f, []any{1.0, []any{[]any{"BlockStored", []any{1, 2}, nil, []any{1, 2, 3, 4}, 2, nil, "GPU"}}, 0}), uint8(0))
	f.Add(mustMarshal(f, []any{1.0, []any{map[string]any{"type": "BlockStored", "block_hashes": []any{3}, "parent_block_hash": 2,
		"token_ids": []any{5, 6}, "block_size": 2, "medium": "CPU"}}, 1}), uint8(1))
	f.Add(mustMarshal(f, []any{1.0, []any{[]any{"BlockRemoved", []any{1}, "GPU"}, []any{"AllBlocksCleared"}}, 0}), uint8(2))
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
