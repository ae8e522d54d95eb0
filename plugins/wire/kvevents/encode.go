package kvevents

import (
	"bytes"

	"github.com/vmihailenco/msgpack/v5"
)

// EventFormat selects how events are encoded: vLLM <= v0.23 (and SGLang) send tagged arrays,
// vLLM >= v0.24 tagged maps. The envelope is an array [ts, events, rank] in both.
type EventFormat int

// Event encodings.
const (
	FormatArray EventFormat = iota
	FormatMap
)

// EncodeBatch encodes b as vLLM does (msgpack, envelope [ts, events, data_parallel_rank]).
// Array events carry every field vLLM declares (nil where unset), as msgspec writes
// array-like structs; map events omit unset fields, as msgspec's omit_defaults does.
// Hashes are unsigned integers (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1).
func EncodeBatch(b Batch, format EventFormat) ([]byte, error) {
	var buf bytes.Buffer
	e := msgpack.NewEncoder(&buf)
	e.UseCompactInts(true)
	if err := e.EncodeArrayLen(3); err != nil {
		return nil, err
	}
	if err := e.EncodeFloat64(b.TS); err != nil {
		return nil, err
	}
	if err := e.EncodeArrayLen(len(b.Events)); err != nil {
		return nil, err
	}
	for i := range b.Events {
		var err error
		if format == FormatMap {
			err = encodeMapEvent(e, &b.Events[i])
		} else {
			err = encodeArrayEvent(e, &b.Events[i])
		}
		if err != nil {
			return nil, err
		}
	}
	if err := e.EncodeInt(int64(b.DPRank)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type encoder struct {
	e   *msgpack.Encoder
	err error
}

func (w *encoder) do(f func() error) {
	if w.err == nil {
		w.err = f()
	}
}

func (w *encoder) str(s string) { w.do(func() error { return w.e.EncodeString(s) }) }
func (w *encoder) optStr(s string) {
	if s == "" {
		w.do(w.e.EncodeNil)
		return
	}
	w.str(s)
}
func (w *encoder) uint(v uint64) { w.do(func() error { return w.e.EncodeUint(v) }) }
func (w *encoder) int(v int)     { w.do(func() error { return w.e.EncodeInt(int64(v)) }) }
func (w *encoder) nil()          { w.do(w.e.EncodeNil) }
func (w *encoder) arr(n int)     { w.do(func() error { return w.e.EncodeArrayLen(n) }) }

// mapHead opens a map-shaped event of n entries with its "type" entry, tag.
func (w *encoder) mapHead(n int, tag string) {
	w.do(func() error { return w.e.EncodeMapLen(n) })
	w.str("type")
	w.str(tag)
}

// field writes key and s when s is set: an optional string entry of a map-shaped event.
func (w *encoder) field(key, s string) {
	if s != "" {
		w.str(key)
		w.str(s)
	}
}
func (w *encoder) hashes(hs []uint64) {
	w.arr(len(hs))
	for _, h := range hs {
		w.uint(h)
	}
}
func (w *encoder) tokens(ts []uint32) {
	w.arr(len(ts))
	for _, t := range ts {
		w.uint(uint64(t))
	}
}
func (w *encoder) extra(x [][]string) {
	w.arr(len(x))
	for _, blk := range x {
		if blk == nil {
			w.nil()
			continue
		}
		w.arr(len(blk))
		for _, s := range blk {
			w.str(s)
		}
	}
}

func encodeArrayEvent(e *msgpack.Encoder, ev *Event) error {
	w := &encoder{e: e}
	switch ev.Kind {
	case KindStored:
		w.arr(1 + len(storedFields))
		w.str(TagStored)
		w.hashes(ev.Hashes)
		if ev.HasParent {
			w.uint(ev.Parent)
		} else {
			w.nil()
		}
		w.tokens(ev.Tokens)
		w.int(ev.BlockSize)
		w.nil() // lora_id
		w.optStr(ev.Medium)
		w.optStr(ev.LoraName)
		if ev.Extra != nil {
			w.extra(ev.Extra)
		} else {
			w.nil()
		}
		if ev.HasGroup {
			w.int(ev.GroupIdx)
		} else {
			w.nil()
		}
		w.optStr(ev.SpecKind)
		w.nil() // kv_cache_spec_sliding_window
	case KindRemoved:
		w.arr(1 + len(removedFields))
		w.str(TagRemoved)
		w.hashes(ev.Hashes)
		w.optStr(ev.Medium)
		if ev.HasGroup {
			w.int(ev.GroupIdx)
		} else {
			w.nil()
		}
	default:
		w.arr(1)
		w.str(TagCleared)
	}
	return w.err
}

func encodeMapEvent(e *msgpack.Encoder, ev *Event) error {
	w := &encoder{e: e}
	n := 1
	switch ev.Kind {
	case KindStored:
		n += 4 // block_hashes, parent_block_hash, token_ids, block_size
		for _, set := range []bool{ev.Medium != "", ev.LoraName != "", ev.Extra != nil, ev.HasGroup, ev.SpecKind != ""} {
			if set {
				n++
			}
		}
		w.mapHead(n, TagStored)
		w.str("block_hashes")
		w.hashes(ev.Hashes)
		w.str("parent_block_hash")
		if ev.HasParent {
			w.uint(ev.Parent)
		} else {
			w.nil()
		}
		w.str("token_ids")
		w.tokens(ev.Tokens)
		w.str("block_size")
		w.int(ev.BlockSize)
		w.field("medium", ev.Medium)
		w.field("lora_name", ev.LoraName)
		if ev.Extra != nil {
			w.str("extra_keys")
			w.extra(ev.Extra)
		}
		if ev.HasGroup {
			w.str("group_idx")
			w.int(ev.GroupIdx)
		}
		w.field("kv_cache_spec_kind", ev.SpecKind)
	case KindRemoved:
		n++
		if ev.Medium != "" {
			n++
		}
		if ev.HasGroup {
			n++
		}
		w.mapHead(n, TagRemoved)
		w.str("block_hashes")
		w.hashes(ev.Hashes)
		w.field("medium", ev.Medium)
		if ev.HasGroup {
			w.str("group_idx")
			w.int(ev.GroupIdx)
		}
	default:
		w.mapHead(1, TagCleared)
	}
	return w.err
}
