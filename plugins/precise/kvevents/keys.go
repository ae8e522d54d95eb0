package kvevents

import (
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Keyer computes request keys: the EPP's own names for prompt blocks, computed the same way
// from a request's token ids and from an event's token_ids, so the index never needs to
// reproduce an engine's hash (vLLM's default sha256 is pickle-based; SGLang's is its own).
// This is llm-d's dual-key design; the chain is llm-d's xxh64 one:
//
//	root        = XXH64(le64(XXH64(hashSeed)) ‖ le64(len(ns)) ‖ ns)   ns = LoRA name or ""
//	key(i)      = XXH64(le64(key(i-1)) ‖ le32(token)… ‖ (le64(len(x)) ‖ x)… )
//
// over blocks of BlockSize tokens (a partial trailing block has no key), x being the block's
// extra keys: cache_salt on block 0, the engine's string extra keys of that block.
type Keyer struct {
	BlockSize int
	seed      uint64
}

// NewKeyer returns a Keyer for blocks of blockSize tokens and the given seed.
func NewKeyer(blockSize int, hashSeed string) Keyer {
	return Keyer{BlockSize: blockSize, seed: xxhash.Sum64String(hashSeed)}
}

// Root is the parent of a sequence's first block in namespace ns (a LoRA adapter's name, or
// "" for the base model).
func (k Keyer) Root(ns string) uint64 {
	buf := make([]byte, 0, 16+len(ns))
	buf = binary.LittleEndian.AppendUint64(buf, k.seed)
	buf = binary.LittleEndian.AppendUint64(buf, uint64(len(ns)))
	buf = append(buf, ns...)
	return xxhash.Sum64(buf)
}

// Block returns the key of one block of tokens after parent, with the block's extra keys.
func (k Keyer) Block(buf []byte, parent uint64, tokens []uint32, extras []string) (uint64, []byte) {
	buf = buf[:0]
	buf = binary.LittleEndian.AppendUint64(buf, parent)
	for _, t := range tokens {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	for _, x := range extras {
		buf = binary.LittleEndian.AppendUint64(buf, uint64(len(x)))
		buf = append(buf, x...)
	}
	return xxhash.Sum64(buf), buf
}

// RequestKeys appends to dst the keys of every full block of tokens, in namespace ns, with
// salt (cache_salt) as block 0's extra key, at most maxBlocks of them (0 = no cap).
func (k Keyer) RequestKeys(dst []uint64, ns string, tokens []uint32, salt string, maxBlocks int) []uint64 {
	if k.BlockSize <= 0 {
		return dst
	}
	n := len(tokens) / k.BlockSize
	if maxBlocks > 0 && n > maxBlocks {
		n = maxBlocks
	}
	parent := k.Root(ns)
	buf := make([]byte, 0, 8+4*k.BlockSize+16+len(salt))
	var salted []string
	if salt != "" {
		salted = []string{salt}
	}
	for i := 0; i < n; i++ {
		var x []string
		if i == 0 {
			x = salted
		}
		parent, buf = k.Block(buf, parent, tokens[i*k.BlockSize:(i+1)*k.BlockSize], x)
		dst = append(dst, parent)
	}
	return dst
}
