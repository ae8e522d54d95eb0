package prefixproducer

import (
	"encoding/binary"
	"encoding/json"
	"errors"

	"github.com/cespare/xxhash/v2"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// blockHash is the chained hash of one prompt block.
type blockHash uint64

// chunker cuts a stream of prompt pieces into blocks of size bytes (at most limit bytes in
// all) and chains their hashes: hash(block i ‖ hash(i-1) as 8 little-endian bytes), hash(-1)
// being the hash of the model name and cache salt, as GIE's producer does. Each block is
// gathered with its predecessor's hash into one small buffer and hashed in one call: a
// streaming digest fed the block and then 8 bytes, then finalised and reset, spent more on
// its bookkeeping than on hashing a 64-byte block (the block bytes are the only copy, 64
// bytes at a time; nothing is re-encoded).
type chunker struct {
	size   int
	limit  int
	total  int
	buf    []byte // the block being filled; capacity size+8
	prev   blockHash
	hashes []blockHash
}

func (c *chunker) write(s string) {
	for len(s) > 0 && c.total < c.limit {
		if len(c.buf) == 0 && len(s) >= c.size && c.limit-c.total >= c.size {
			s = c.whole(s)
			continue
		}
		n := min(len(s), c.size-len(c.buf), c.limit-c.total)
		c.buf = append(c.buf, s[:n]...)
		s = s[n:]
		c.total += n
		if len(c.buf) == c.size {
			c.buf = binary.LittleEndian.AppendUint64(c.buf, uint64(c.prev))
			c.prev = blockHash(xxhash.Sum64(c.buf))
			c.hashes = append(c.hashes, c.prev)
			c.buf = c.buf[:0]
		}
	}
}

// whole hashes the whole blocks at the start of s (nearly all of a long prompt) with the
// chunker's state in registers, and returns the rest of s; the chunker holds no partial block.
func (c *chunker) whole(s string) string {
	size, prev, hashes := c.size, c.prev, c.hashes
	n := min(len(s)/size, (c.limit-c.total)/size)
	b := c.buf[:size+8]
	for range n {
		copy(b, s[:size])
		binary.LittleEndian.PutUint64(b[size:], uint64(prev))
		prev = blockHash(xxhash.Sum64(b))
		hashes = append(hashes, prev)
		s = s[size:]
	}
	c.prev, c.hashes, c.total = prev, hashes, c.total+n*size
	return s
}

func (c *chunker) full() bool { return c.total >= c.limit }

// sep separates the pieces of a chat (message fields, messages) so that moving bytes from one
// piece to the next changes the hashes.
const sep = "\x00"

// hashPrompt returns the chained block hashes of the request's prompt: blockSizeTokens ×
// CharactersPerToken bytes a block, at most maxBlocks blocks, only whole blocks. The bytes
// hashed are the prompt text (chat: each message's role and content text, non-text blocks
// as their JSON; completions: the prompt); other APIs hash their input's JSON
// as GIE does. Only consistency within this producer matters: block hashes are never compared
// with another producer's.
func hashPrompt(request *fwksched.LLMRequest, blockSizeTokens, maxBlocks int) []blockHash {
	if request == nil || request.Body == nil {
		return nil
	}
	size := blockSizeTokens * CharactersPerToken
	if size <= 0 || maxBlocks <= 0 {
		return nil
	}
	seed := xxhash.Sum64String(request.TargetModel)
	if salt := request.Body.CacheSalt(); salt != "" {
		seed = xxhash.Sum64String(request.TargetModel + salt)
	}
	c := &chunker{size: size, limit: size * maxBlocks, prev: blockHash(seed), buf: make([]byte, 0, size+8)}
	b := request.Body
	// One allocation for the hashes: a whole 1 MB prompt is 16,000 blocks, and growing the
	// slice by appends copied it ~15 times (a third of the hashing's CPU).
	c.hashes = make([]blockHash, 0, min(maxBlocks, promptBytes(b)/size))
	switch {
	case b.ChatCompletions != nil:
		for _, m := range b.ChatCompletions.Messages {
			if c.full() {
				break
			}
			c.write(m.Role)
			c.write(sep)
			c.write(m.Content.Raw)
			for _, blk := range m.Content.Structured {
				if blk.Type == "text" {
					c.write(blk.Text)
				} else {
					js, _ := json.Marshal(blk)
					c.write(string(js))
				}
				c.write(sep)
			}
			c.write(sep)
		}
	case b.Completions != nil:
		c.write(b.Completions.Prompt.PlainText())
	default:
		js, err := otherInput(b)
		if err != nil {
			return nil
		}
		c.write(string(js))
	}
	return c.hashes
}

// promptBytes is the number of text bytes hashPrompt hashes for a chat or completion (0 for
// other APIs; non-text chat blocks are not counted), to size the hashes once.
func promptBytes(b *fwksched.LLMRequestBody) int {
	n := 0
	switch {
	case b.ChatCompletions != nil:
		for _, m := range b.ChatCompletions.Messages {
			n += len(m.Role) + len(m.Content.Raw) + 2*len(sep)
			for _, blk := range m.Content.Structured {
				n += len(blk.Text) + len(sep)
			}
		}
	case b.Completions != nil:
		n = len(b.Completions.Prompt.Raw)
	}
	return n
}

// otherInput is GIE's input for the APIs without a prompt text.
func otherInput(b *fwksched.LLMRequestBody) ([]byte, error) {
	switch {
	case b.Conversations != nil:
		return json.Marshal(b.Conversations.Items)
	case b.Responses != nil:
		var combined []map[string]any
		if b.Responses.Instructions != nil {
			combined = append(combined, map[string]any{"instructions": b.Responses.Instructions})
		}
		if b.Responses.Tools != nil {
			combined = append(combined, map[string]any{"tools": b.Responses.Tools})
		}
		combined = append(combined, map[string]any{"input": b.Responses.Input})
		return json.Marshal(combined)
	case b.Embeddings != nil:
		return json.Marshal(b.Embeddings.Input)
	}
	return nil, errNoInput
}

var errNoInput = errors.New("invalid request body: no recognized API format found")
