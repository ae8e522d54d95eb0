package kvevents

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func mustMarshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The wire shapes below are written as generic msgpack values, the way each engine version
// lays them out (kv-events digest §1.4, §2, §5).
func TestDecodeBatchShapes(t *testing.T) {
	tokens16 := make([]any, 16)
	want16 := make([]uint32, 16)
	for i := range tokens16 {
		tokens16[i] = i + 1
		want16[i] = uint32(i + 1)
	}
	bigHash := uint64(15760518052499183552)
	digest := make([]byte, 32)
	for i := range digest {
		digest[i] = byte(i)
	}
	tests := []struct {
		name string
		in   any
		want Batch
	}{
		{
			name: "vLLM <= 0.23 array events, full width",
			in: []any{1.5, []any{
				[]any{"BlockStored", []any{bigHash}, nil, tokens16, 16, nil, "GPU", nil, nil, nil, nil, nil},
				[]any{"BlockRemoved", []any{bigHash}, "GPU", nil},
				[]any{"AllBlocksCleared"},
			}, 0},
			want: Batch{TS: 1.5, HasRank: true, Events: []Event{
				{Kind: KindStored, Hashes: []uint64{bigHash}, Tokens: want16, BlockSize: 16, Medium: "GPU"},
				{Kind: KindRemoved, Hashes: []uint64{bigHash}, Medium: "GPU"},
				{Kind: KindCleared},
			}},
		},
		{
			name: "vLLM >= 0.24 map events (kthena capture shape), rank 2",
			in: []any{1789095808.83, []any{
				map[string]any{"type": "BlockStored", "block_hashes": []any{bigHash}, "parent_block_hash": uint64(7), "token_ids": tokens16,
					"block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil, "extra_keys": []any{[]any{"salt-1"}}, "group_idx": 0,
					"kv_cache_spec_kind": "full_attention", "locality": "LOCAL"},
			}, 2},
			want: Batch{TS: 1789095808.83, DPRank: 2, HasRank: true, Events: []Event{
				{Kind: KindStored, Hashes: []uint64{bigHash}, Parent: 7, HasParent: true, Tokens: want16, BlockSize: 16, Medium: "GPU",
					Extra: [][]string{{"salt-1"}}, HasGroup: true, SpecKind: "full_attention"},
			}},
		},
		{
			name: "original 2-element envelope, short stored array, bytes and negative hashes",
			in: []any{int64(3), []any{
				[]any{"BlockStored", []any{digest, int64(-5)}, nil, []any{1, 2}, 1},
			}},
			want: Batch{TS: 3, Events: []Event{
				{Kind: KindStored, Hashes: []uint64{0x18191a1b1c1d1e1f, uint64(math.MaxUint64 - 4)}, Tokens: []uint32{1, 2}, BlockSize: 1},
			}},
		},
		{
			name: "SGLang BlockStoredWithMetadata trailer and nil rank",
			in: []any{2.0, []any{
				[]any{"BlockStored", []any{uint64(9)}, uint64(8), []any{5}, 1, nil, "CPU_PINNED", map[string]any{"cache_salt": "s"}},
			}, nil},
			want: Batch{TS: 2, Events: []Event{
				{Kind: KindStored, Hashes: []uint64{9}, Parent: 8, HasParent: true, Tokens: []uint32{5}, BlockSize: 1, Medium: "CPU_PINNED", CacheSalt: "s"},
			}},
		},
		{
			name: "SGLang metadata as an array (salt first), or a map with other fields",
			in: []any{2.0, []any{
				map[string]any{"type": "BlockStored", "block_hashes": []any{uint64(9)}, "token_ids": []any{5}, "block_size": 1, "metadata": []any{"a", 1}},
				[]any{"BlockStored", []any{uint64(10)}, nil, []any{5}, 1, nil, "GPU", map[string]any{"other": 1, "cache_salt": "b"}},
			}},
			want: Batch{TS: 2, Events: []Event{
				{Kind: KindStored, Hashes: []uint64{9}, Tokens: []uint32{5}, BlockSize: 1, CacheSalt: "a"},
				{Kind: KindStored, Hashes: []uint64{10}, Tokens: []uint32{5}, BlockSize: 1, Medium: "GPU", CacheSalt: "b"},
			}},
		},
		{
			name: "map envelope, llm-d-inference-sim's parent 0 means none",
			in:   map[string]any{"ts": 4.0, "events": []any{[]any{"BlockStored", []any{uint64(1)}, uint64(0), []any{1}, 1}}, "data_parallel_rank": 1},
			want: Batch{TS: 4, DPRank: 1, HasRank: true, Events: []Event{
				{Kind: KindStored, Hashes: []uint64{1}, Tokens: []uint32{1}, BlockSize: 1},
			}},
		},
		{
			name: "extra_keys with multimodal tuples, nil blocks and non-string entries",
			in: []any{1.0, []any{
				map[string]any{"type": "BlockStored", "block_hashes": []any{1, 2}, "token_ids": []any{1, 2}, "block_size": 1,
					"extra_keys": []any{[]any{"lora-a", []any{"mm-hash", 3}, []byte{1}, 7}, nil}},
			}, 0},
			want: Batch{TS: 1, HasRank: true, Events: []Event{
				{Kind: KindStored, Hashes: []uint64{1, 2}, Tokens: []uint32{1, 2}, BlockSize: 1, Extra: [][]string{{"lora-a", "mm-hash"}, nil}},
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeBatch(mustMarshal(t, tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDecodeBatchRejects(t *testing.T) {
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"not msgpack container", mustMarshal(t, "hello")},
		{"one-element envelope", mustMarshal(t, []any{1.0})},
		{"unknown event tag", mustMarshal(t, []any{1.0, []any{[]any{"BlockMoved", []any{1}}}, 0})},
		{"map event without type", mustMarshal(t, []any{1.0, []any{map[string]any{"block_hashes": []any{1}}}, 0})},
		{"string ts", mustMarshal(t, []any{"x", []any{}, 0})},
		{"hash of wrong type", mustMarshal(t, []any{1.0, []any{[]any{"BlockRemoved", []any{1.5}}}, 0})},
		{"negative token", mustMarshal(t, []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 1}}, 0})},
		{"negative rank", mustMarshal(t, []any{1.0, []any{}, -1})},
		{"truncated", mustMarshal(t, []any{1.0, []any{[]any{"BlockStored", []any{1, 2, 3}}}, 0})[:12]},
		{"map envelope without events", mustMarshal(t, map[string]any{"ts": 1.0})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := DecodeBatch(tc.in); !errors.Is(err, ErrMalformed) {
				t.Fatalf("err = %v, want ErrMalformed", err)
			}
		})
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	b := Batch{TS: 12.25, DPRank: 1, HasRank: true, Events: []Event{
		{Kind: KindStored, Hashes: []uint64{1 << 63, 42}, Parent: 99, HasParent: true, Tokens: []uint32{1, 2, 3, 4}, BlockSize: 2, Medium: "GPU",
			LoraName: "l", Extra: [][]string{{"salt"}, nil}, GroupIdx: 1, HasGroup: true, SpecKind: "full_attention"},
		{Kind: KindStored, Hashes: []uint64{5}, Tokens: []uint32{7, 8}, BlockSize: 2},
		{Kind: KindRemoved, Hashes: []uint64{1 << 63}, Medium: "GPU"},
		{Kind: KindCleared},
	}}
	for _, f := range []EventFormat{FormatArray, FormatMap} {
		raw, err := EncodeBatch(b, f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeBatch(raw)
		if err != nil {
			t.Fatalf("format %d: %v", f, err)
		}
		if !reflect.DeepEqual(got, b) {
			t.Fatalf("format %d:\ngot  %+v\nwant %+v", f, got, b)
		}
	}
}

func TestFoldHash(t *testing.T) {
	tests := []struct {
		in   []byte
		want uint64
	}{
		{nil, 0},
		{[]byte{1}, 1},
		{[]byte{1, 0, 0, 0, 0, 0, 0, 0, 2}, 2},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, math.MaxUint64},
	}
	for _, tc := range tests {
		if got := FoldHash(tc.in); got != tc.want {
			t.Errorf("FoldHash(%x) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// FuzzDecodeBatch: no input panics, and whatever decodes re-encodes and decodes to the same
// batch (the decoder keeps nothing it cannot represent).
func FuzzDecodeBatch(f *testing.F) {
	seeds := []any{
		[]any{1.5, []any{[]any{"BlockStored", []any{uint64(1) << 63}, nil, []any{1, 2}, 2, nil, "GPU", nil, nil, nil, nil, nil}}, 0},
		[]any{1.5, []any{map[string]any{"type": "BlockRemoved", "block_hashes": []any{1}, "medium": "CPU"}}, 3},
		[]any{1, []any{[]any{"AllBlocksCleared"}}},
		map[string]any{"ts": 1, "events": []any{}, "attn_dp_rank": 0},
		[]any{1.0, []any{[]any{"BlockStored", []any{[]byte("0123456789abcdef")}, []byte{1}, []any{1}, 1, nil, "CPU_PINNED", map[string]any{"cache_salt": "x"}}}, nil},
	}
	for _, s := range seeds {
		f.Add(mustMarshal(f, s))
	}
	f.Add([]byte{0x93, 0xcb})
	f.Add([]byte{0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBatch(data)
		if err != nil {
			return
		}
		for _, ev := range b.Events {
			if ev.Kind < KindStored || ev.Kind > KindCleared {
				t.Fatalf("kind %d", ev.Kind)
			}
		}
		raw, err := EncodeBatch(b, FormatMap)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeBatch(raw)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if len(again.Events) != len(b.Events) {
			t.Fatalf("events %d != %d", len(again.Events), len(b.Events))
		}
	})
}
