// Package kvevents is the KV-cache event codec: the msgpack batches of BlockStored,
// BlockRemoved and AllBlocksCleared that vLLM and SGLang publish over ZeroMQ. DecodeBatch reads
// every shape the engines have sent; EncodeBatch writes the shapes vLLM writes.
//
// It is wire: the EPP's subscriber and index (plugins/precise/kvevents) decode with it and the
// simulator (cmd/sim) encodes with it, so both speak one format. It imports nothing of pdgate
// outside plugins/wire and no GIE package (hack/pluginimports checks this).
package kvevents

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// Kind is the type of one KV-cache event.
type Kind uint8

// Event kinds, named by their wire tags.
const (
	KindStored  Kind = iota + 1 // "BlockStored"
	KindRemoved                 // "BlockRemoved"
	KindCleared                 // "AllBlocksCleared"
)

// Wire tags of the event kinds.
const (
	TagStored  = "BlockStored"
	TagRemoved = "BlockRemoved"
	TagCleared = "AllBlocksCleared"
)

func (k Kind) String() string {
	switch k {
	case KindStored:
		return TagStored
	case KindRemoved:
		return TagRemoved
	case KindCleared:
		return TagCleared
	}
	return "unknown"
}

// Decoding limits. A batch is at most MaxPayloadBytes long, so every list it holds is bounded
// by the payload anyway; these limits make the bound explicit and cheap to check.
const (
	// MaxPayloadBytes is the largest batch payload decoded; larger ones are refused.
	MaxPayloadBytes = 16 << 20
	// MaxEventsPerBatch bounds the events of one batch.
	MaxEventsPerBatch = 1 << 16
	// maxDepth bounds the nesting skipped in unknown fields.
	maxExtraStrings = 64
)

// Event is one decoded KV-cache event. Fields an engine did not send are zero.
type Event struct {
	Kind Kind
	// Hashes are the engine's block hashes (BlockStored, BlockRemoved), folded to 64 bits:
	// integers as sent (negative ones as their two's complement), byte strings by their last
	// 8 bytes read big-endian, as vLLM does with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1.
	Hashes []uint64
	// Parent is the hash of the block before the first one (BlockStored); HasParent is false
	// when the engine sent nil (the first block of a sequence). A parent of 0 is treated as
	// none, as llm-d does (llm-d-inference-sim sends 0).
	Parent    uint64
	HasParent bool
	// Tokens are the token ids of exactly the stored blocks.
	Tokens []uint32
	// BlockSize is the engine's block size in tokens.
	BlockSize int
	// Medium is the storage tier ("GPU", "CPU", ...), empty when not sent.
	Medium string
	// LoraName is the LoRA adapter the blocks belong to, empty for the base model.
	LoraName string
	// Extra holds, per block of Hashes, the string extra keys the engine folded into that
	// block's hash (vLLM's extra_keys: cache_salt on block 0, multimodal identifiers), or nil.
	Extra [][]string
	// GroupIdx is the KV-cache group of hybrid models (HasGroup when sent).
	GroupIdx int
	HasGroup bool
	// SpecKind is kv_cache_spec_kind ("full_attention", "sliding_window", ...), if sent.
	SpecKind string
	// CacheSalt is SGLang's metadata.cache_salt (BlockStoredWithMetadata), if sent.
	CacheSalt string
}

// Batch is one published message: the event batch of one scheduler step.
type Batch struct {
	// TS is the publisher's Unix time in seconds.
	TS     float64
	Events []Event
	// DPRank is the data-parallel rank (vLLM's data_parallel_rank, SGLang's attn_dp_rank);
	// HasRank is false when the envelope had no rank or nil.
	DPRank  int
	HasRank bool
}

// ErrMalformed wraps every decoding error.
var ErrMalformed = errors.New("malformed KV event batch")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// DecodeBatch decodes one msgpack payload. It accepts what vLLM and SGLang have sent over
// time: the envelope as an array [ts, events, rank] (2 or more elements) or as a map; each
// event as a tagged array (vLLM <= v0.23, SGLang) or a map with a "type" key (vLLM >= v0.24,
// recent SGLang); every integer width; hashes as integers or byte strings; absent trailing
// fields; unknown fields and keys (skipped). An unknown event tag fails the batch.
func DecodeBatch(payload []byte) (Batch, error) {
	var b Batch
	if len(payload) > MaxPayloadBytes {
		return b, malformed("payload of %d bytes exceeds %d", len(payload), MaxPayloadBytes)
	}
	d := msgpack.NewDecoder(bytes.NewReader(payload))
	c, err := d.PeekCode()
	if err != nil {
		return b, malformed("empty payload: %v", err)
	}
	switch {
	case isArray(c):
		n, err := d.DecodeArrayLen()
		if err != nil {
			return b, malformed("envelope: %v", err)
		}
		if n < 2 {
			return b, malformed("envelope has %d elements, want [ts, events, rank]", n)
		}
		if b.TS, err = decodeFloat(d); err != nil {
			return b, malformed("ts: %v", err)
		}
		if b.Events, err = decodeEvents(d); err != nil {
			return b, err
		}
		if n >= 3 {
			if b.DPRank, b.HasRank, err = decodeOptInt(d); err != nil {
				return b, malformed("data_parallel_rank: %v", err)
			}
		}
		for i := 3; i < n; i++ {
			if err := d.Skip(); err != nil {
				return b, malformed("envelope: %v", err)
			}
		}
	case isMap(c):
		n, err := d.DecodeMapLen()
		if err != nil {
			return b, malformed("envelope: %v", err)
		}
		seenEvents := false
		for i := 0; i < n; i++ {
			k, err := decodeKey(d)
			if err != nil {
				return b, malformed("envelope key: %v", err)
			}
			switch k {
			case "ts":
				b.TS, err = decodeFloat(d)
			case "events":
				b.Events, err = decodeEvents(d)
				seenEvents = true
			case "data_parallel_rank", "attn_dp_rank":
				b.DPRank, b.HasRank, err = decodeOptInt(d)
			default:
				err = d.Skip()
			}
			if err != nil {
				return b, malformed("envelope %s: %v", k, err)
			}
		}
		if !seenEvents {
			return b, malformed("envelope map has no events")
		}
	default:
		return b, malformed("envelope is neither an array nor a map (code 0x%02x)", c)
	}
	if b.HasRank && b.DPRank < 0 {
		return b, malformed("negative data_parallel_rank %d", b.DPRank)
	}
	return b, nil
}

func isArray(c byte) bool {
	return msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32
}

func isMap(c byte) bool {
	return msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32
}

func isInt(c byte) bool {
	return msgpcode.IsFixedNum(c) || (c >= msgpcode.Uint8 && c <= msgpcode.Int64)
}

// peekValue returns the code of the next value, and whether it is nil: an optional field left
// out, which it consumes.
func peekValue(d *msgpack.Decoder) (code byte, isNil bool, err error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, false, err
	}
	if c == msgpcode.Nil {
		return c, true, d.DecodeNil()
	}
	return c, false, nil
}

func decodeFloat(d *msgpack.Decoder) (float64, error) {
	c, isNil, err := peekValue(d)
	if err != nil || isNil {
		return 0, err
	}
	if c != msgpcode.Float && c != msgpcode.Double && !isInt(c) {
		return 0, fmt.Errorf("not a number (code 0x%02x)", c)
	}
	return d.DecodeFloat64()
}

func decodeOptInt(d *msgpack.Decoder) (int, bool, error) {
	c, isNil, err := peekValue(d)
	if err != nil || isNil {
		return 0, false, err
	}
	if !isInt(c) {
		return 0, false, fmt.Errorf("not an integer (code 0x%02x)", c)
	}
	v, err := d.DecodeInt64()
	if err != nil {
		return 0, false, err
	}
	if v > 1<<31 || v < -(1<<31) {
		return 0, false, fmt.Errorf("integer %d out of range", v)
	}
	return int(v), true, nil
}

func decodeOptString(d *msgpack.Decoder) (string, error) {
	c, isNil, err := peekValue(d)
	if err != nil || isNil {
		return "", err
	}
	if !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		return "", fmt.Errorf("not a string (code 0x%02x)", c)
	}
	return d.DecodeString()
}

func decodeKey(d *msgpack.Decoder) (string, error) {
	c, err := d.PeekCode()
	if err != nil {
		return "", err
	}
	if !msgpcode.IsString(c) && !msgpcode.IsBin(c) {
		// A non-string key is not one of ours: report it as unknown, then skip its value.
		if err := d.Skip(); err != nil {
			return "", err
		}
		return "", nil
	}
	return d.DecodeString()
}

// decodeHash reads one block hash: an integer of any width, or a byte string folded to its
// last 8 bytes read big-endian (shorter strings are left-padded with zeros).
func decodeHash(d *msgpack.Decoder) (uint64, error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, err
	}
	switch {
	case isInt(c):
		return d.DecodeUint64()
	case msgpcode.IsBin(c) || msgpcode.IsString(c):
		raw, err := d.DecodeBytes()
		if err != nil {
			return 0, err
		}
		return FoldHash(raw), nil
	}
	return 0, fmt.Errorf("hash is neither an integer nor bytes (code 0x%02x)", c)
}

// FoldHash folds a digest to the 64-bit external id vLLM uses: its last 8 bytes, big-endian.
func FoldHash(raw []byte) uint64 {
	var buf [8]byte
	if len(raw) >= 8 {
		copy(buf[:], raw[len(raw)-8:])
	} else {
		copy(buf[8-len(raw):], raw)
	}
	return binary.BigEndian.Uint64(buf[:])
}

// decodeArray reads a msgpack array (nil: a nil slice) element by element; it reserves at
// most hint elements up front, so a forged length cannot make it allocate.
func decodeArray[T any](d *msgpack.Decoder, hint int, elem func(i int) (T, error)) ([]T, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	if n < 0 {
		return nil, nil
	}
	out := make([]T, 0, min(n, hint))
	for i := 0; i < n; i++ {
		v, err := elem(i)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func decodeHashes(d *msgpack.Decoder) ([]uint64, error) {
	return decodeArray(d, 1024, func(i int) (uint64, error) {
		h, err := decodeHash(d)
		if err != nil {
			return 0, fmt.Errorf("block_hashes[%d]: %w", i, err)
		}
		return h, nil
	})
}

func decodeOptHash(d *msgpack.Decoder) (uint64, bool, error) {
	if _, isNil, err := peekValue(d); err != nil || isNil {
		return 0, false, err
	}
	h, err := decodeHash(d)
	if err != nil {
		return 0, false, err
	}
	return h, h != 0, nil
}

func decodeTokens(d *msgpack.Decoder) ([]uint32, error) {
	return decodeArray(d, 4096, func(i int) (uint32, error) {
		c, err := d.PeekCode()
		if err != nil {
			return 0, err
		}
		if !isInt(c) {
			return 0, fmt.Errorf("token_ids[%d] is not an integer", i)
		}
		v, err := d.DecodeInt64()
		if err != nil {
			return 0, err
		}
		if v < 0 || v > 1<<32-1 {
			return 0, fmt.Errorf("token_ids[%d] = %d out of range", i, v)
		}
		return uint32(v), nil
	})
}

// decodeExtraKeys reads vLLM's extra_keys: per block nil or a tuple of entries; an entry is a
// string (cache_salt, a multimodal identifier, the LoRA name), a [string, offset] tuple
// (multimodal identifier and offset) or something else (bytes, numbers: skipped).
func decodeExtraKeys(d *msgpack.Decoder) ([][]string, error) {
	return decodeArray(d, 1024, func(i int) ([]string, error) {
		c, err := d.PeekCode()
		if err != nil {
			return nil, err
		}
		if c == msgpcode.Nil {
			_ = d.DecodeNil()
			return nil, nil
		}
		if !isArray(c) {
			return nil, d.Skip()
		}
		m, err := d.DecodeArrayLen()
		if err != nil {
			return nil, err
		}
		var block []string
		for j := 0; j < m; j++ {
			s, ok, err := decodeExtraEntry(d)
			if err != nil {
				return nil, fmt.Errorf("extra_keys[%d][%d]: %w", i, j, err)
			}
			if ok && len(block) < maxExtraStrings {
				block = append(block, s)
			}
		}
		return block, nil
	})
}

func decodeExtraEntry(d *msgpack.Decoder) (string, bool, error) {
	c, err := d.PeekCode()
	if err != nil {
		return "", false, err
	}
	switch {
	case msgpcode.IsString(c):
		s, err := d.DecodeString()
		return s, err == nil, err
	case isArray(c):
		m, err := d.DecodeArrayLen()
		if err != nil {
			return "", false, err
		}
		s, ok := "", false
		for k := 0; k < m; k++ {
			ck, err := d.PeekCode()
			if err != nil {
				return "", false, err
			}
			if k == 0 && msgpcode.IsString(ck) {
				if s, err = d.DecodeString(); err != nil {
					return "", false, err
				}
				ok = true
				continue
			}
			if err := d.Skip(); err != nil {
				return "", false, err
			}
		}
		return s, ok, nil
	}
	return "", false, d.Skip()
}

func decodeEvents(d *msgpack.Decoder) ([]Event, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return nil, malformed("events: %v", err)
	}
	if n < 0 {
		return nil, nil
	}
	if n > MaxEventsPerBatch {
		return nil, malformed("%d events exceed %d per batch", n, MaxEventsPerBatch)
	}
	out := make([]Event, 0, min(n, 256))
	for i := 0; i < n; i++ {
		ev, err := decodeEvent(d)
		if err != nil {
			return nil, malformed("event %d: %v", i, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// Positional field order after the tag (vLLM's declaration order; SGLang's is a prefix of it
// for BlockStored, with its metadata struct last).
var (
	storedFields  = []string{"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"}
	removedFields = []string{"block_hashes", "medium", "group_idx"}
)

func decodeEvent(d *msgpack.Decoder) (Event, error) {
	var ev Event
	c, err := d.PeekCode()
	if err != nil {
		return ev, err
	}
	switch {
	case isArray(c):
		n, err := d.DecodeArrayLen()
		if err != nil {
			return ev, err
		}
		if n < 1 {
			return ev, fmt.Errorf("empty event array")
		}
		tag, err := decodeOptString(d)
		if err != nil {
			return ev, fmt.Errorf("tag: %w", err)
		}
		if ev.Kind, err = kindOf(tag); err != nil {
			return ev, err
		}
		fields := fieldsOf(ev.Kind)
		for i := 1; i < n; i++ {
			name := ""
			if i-1 < len(fields) {
				name = fields[i-1]
			}
			if ev.Kind == KindStored && i > 6 && isMapNext(d) {
				// SGLang's BlockStoredWithMetadata: its metadata struct follows medium; no
				// vLLM field there is a map.
				name = "metadata"
			}
			if err := ev.decodeField(d, name); err != nil {
				return ev, err
			}
		}
	case isMap(c):
		n, err := d.DecodeMapLen()
		if err != nil {
			return ev, err
		}
		// The "type" key may come anywhere; fields are decoded as they come.
		for i := 0; i < n; i++ {
			k, err := decodeKey(d)
			if err != nil {
				return ev, err
			}
			if k == "type" {
				tag, err := decodeOptString(d)
				if err != nil {
					return ev, fmt.Errorf("type: %w", err)
				}
				if ev.Kind, err = kindOf(tag); err != nil {
					return ev, err
				}
				continue
			}
			if err := ev.decodeField(d, k); err != nil {
				return ev, err
			}
		}
		if ev.Kind == 0 {
			return ev, fmt.Errorf("event map has no type")
		}
	default:
		return ev, fmt.Errorf("event is neither an array nor a map (code 0x%02x)", c)
	}
	return ev, ev.check()
}

func isMapNext(d *msgpack.Decoder) bool {
	c, err := d.PeekCode()
	return err == nil && isMap(c)
}

func kindOf(tag string) (Kind, error) {
	switch tag {
	case TagStored, "BlockStoredWithMetadata":
		return KindStored, nil
	case TagRemoved:
		return KindRemoved, nil
	case TagCleared:
		return KindCleared, nil
	}
	if len(tag) > 64 {
		tag = tag[:64]
	}
	return 0, fmt.Errorf("unknown event type %q", tag)
}

func fieldsOf(k Kind) []string {
	switch k {
	case KindStored:
		return storedFields
	case KindRemoved:
		return removedFields
	}
	return nil
}

func (ev *Event) decodeField(d *msgpack.Decoder, name string) error {
	var err error
	switch name {
	case "block_hashes":
		ev.Hashes, err = decodeHashes(d)
	case "parent_block_hash":
		ev.Parent, ev.HasParent, err = decodeOptHash(d)
	case "token_ids":
		ev.Tokens, err = decodeTokens(d)
	case "block_size":
		var ok bool
		ev.BlockSize, ok, err = decodeOptInt(d)
		if err == nil && ok && ev.BlockSize < 0 {
			err = fmt.Errorf("negative block_size")
		}
	case "medium":
		ev.Medium, err = decodeOptString(d)
	case "lora_name":
		ev.LoraName, err = decodeOptString(d)
	case "extra_keys":
		ev.Extra, err = decodeExtraKeys(d)
	case "group_idx":
		ev.GroupIdx, ev.HasGroup, err = decodeOptInt(d)
		if err == nil && ev.GroupIdx < 0 {
			err = fmt.Errorf("negative group_idx")
		}
	case "kv_cache_spec_kind":
		ev.SpecKind, err = decodeOptString(d)
	case "metadata":
		err = ev.decodeMetadata(d)
	case "cache_salt": // SGLang map events
		ev.CacheSalt, err = decodeOptString(d)
	default: // lora_id, kv_cache_spec_sliding_window, locality, ownership, unknown keys
		err = d.Skip()
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// decodeMetadata reads SGLang's metadata struct {cache_salt} (a map, or an array whose first
// element is the salt).
func (ev *Event) decodeMetadata(d *msgpack.Decoder) error {
	c, err := d.PeekCode()
	if err != nil {
		return err
	}
	if !isMap(c) && !isArray(c) {
		return d.Skip()
	}
	// A map names its fields; an array holds them in order, the salt first.
	var n int
	if isMap(c) {
		n, err = d.DecodeMapLen()
	} else {
		n, err = d.DecodeArrayLen()
	}
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		salt := i == 0
		if isMap(c) {
			k, err := decodeKey(d)
			if err != nil {
				return err
			}
			salt = k == "cache_salt"
		}
		if salt {
			if ev.CacheSalt, err = decodeOptString(d); err != nil {
				return err
			}
			continue
		}
		if err := d.Skip(); err != nil {
			return err
		}
	}
	return nil
}

// check enforces what consumers rely on.
func (ev *Event) check() error {
	if ev.Kind == KindStored && len(ev.Extra) > 0 && len(ev.Extra) != len(ev.Hashes) {
		// vLLM sends one entry per block; anything else cannot be aligned: drop the extras
		// rather than guess (the blocks then key without them and simply do not match).
		ev.Extra = nil
	}
	return nil
}

// NormalizeTier maps an event's medium to an index tier name: lowercased, empty = "gpu".
// SGLang's CPU_PINNED is "cpu".
func NormalizeTier(medium string) string {
	m := strings.ToLower(medium)
	switch m {
	case "":
		return "gpu"
	case "cpu_pinned":
		return "cpu"
	}
	return m
}
