package workload

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// BytesPerToken is the simulator's tokenizer estimate (plugins/wire/bytetokens): 4 bytes of
// text per token.
const BytesPerToken = 4

// BlockKey names one synthesized block: a trace's block id, and a salt that gives the same
// id another text (a replay's later passes over the trace must not hit the first pass's
// cache; salt 0 is the trace's own text).
type BlockKey struct {
	ID, Salt uint64
}

// BlockText turns a trace's block ids into prompt text: each key becomes a fixed 512-token
// block (2,048 bytes at 4 bytes per token) that depends on the key alone, so equal prefixes
// of keys give byte-equal prefixes of text, and different keys different text (each block
// opens with its key). Blocks are cached, the oldest evicted first past the bound. Not safe
// for concurrent use: give each replay its own.
type BlockText struct {
	max   int
	cache map[BlockKey]string
	order []BlockKey // ring of cached keys, oldest at next
	next  int
	// Made and Hits count generated and cached blocks (tests, tuning).
	Made, Hits int
}

// BlockBytes is one block's text size.
const BlockBytes = MooncakeBlockTokens * BytesPerToken

// DefaultBlockCache is the default bound: 8,192 blocks, 16 MiB of text (the FAST'25
// conversation trace has ~180k distinct ids; its reuse is mostly recent conversations').
const DefaultBlockCache = 8192

// NewBlockText caches at most maxBlocks blocks (<= 0: DefaultBlockCache).
func NewBlockText(maxBlocks int) *BlockText {
	if maxBlocks <= 0 {
		maxBlocks = DefaultBlockCache
	}
	return &BlockText{max: maxBlocks, cache: make(map[BlockKey]string, maxBlocks)}
}

// blockWords are the filler's vocabulary (64 words, so a block is not a few repeated bytes).
var blockWords = strings.Fields(`the a of to and in is for on that with as by at from this be are was it
	data path token cache model route prefill decode serve block gpu kernel batch queue prompt
	layer head key value tensor memory node pod rack zone fleet trace turn user reply agent
	tool plan code test file page chunk index score load rate time step`)

// Block is the 2,048-byte text of key.
func (b *BlockText) Block(k BlockKey) string {
	if s, ok := b.cache[k]; ok {
		b.Hits++
		return s
	}
	b.Made++
	s := makeBlock(k)
	if len(b.order) < b.max {
		b.order = append(b.order, k)
	} else {
		delete(b.cache, b.order[b.next])
		b.order[b.next] = k
		b.next = (b.next + 1) % b.max
	}
	b.cache[k] = s
	return s
}

func makeBlock(k BlockKey) string {
	var sb strings.Builder
	sb.Grow(BlockBytes + 16)
	sb.WriteString("#")
	sb.WriteString(strconv.FormatUint(k.ID, 10))
	if k.Salt != 0 {
		sb.WriteByte('/')
		sb.WriteString(strconv.FormatUint(k.Salt, 10))
	}
	sb.WriteByte(' ')
	rng := rand.New(rand.NewPCG(k.ID, k.Salt^0x9e3779b97f4a7c15))
	for sb.Len() < BlockBytes {
		sb.WriteString(blockWords[rng.IntN(len(blockWords))])
		sb.WriteByte(' ')
	}
	return sb.String()[:BlockBytes]
}

// Prompt is the text of a prompt of tokens tokens made of the blocks keys (the last block cut
// to the remainder): tokens × 4 bytes. keys must cover tokens (len(keys) × 512 >= tokens);
// blocks beyond it are ignored.
func (b *BlockText) Prompt(keys []BlockKey, tokens int) string {
	n := tokens * BytesPerToken
	var sb strings.Builder
	sb.Grow(n)
	for _, k := range keys {
		if sb.Len() >= n {
			break
		}
		blk := b.Block(k)
		if rest := n - sb.Len(); rest < len(blk) {
			blk = blk[:rest]
		}
		sb.WriteString(blk)
	}
	return sb.String()
}

// Keys are a row's block keys under salt; every id in keep (the trace's shared prefix, say)
// keeps salt 0.
func (r MooncakeRow) Keys(salt uint64, keep map[uint64]bool) []BlockKey {
	out := make([]BlockKey, len(r.HashIDs))
	for i, id := range r.HashIDs {
		s := salt
		if keep[id] {
			s = 0
		}
		out[i] = BlockKey{ID: id, Salt: s}
	}
	return out
}
