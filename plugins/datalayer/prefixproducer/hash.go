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
// being the hash of the model name and cache salt, as GIE's producer does. It hashes the
// pieces where they lie: nothing is copied or re-encoded.
type chunker struct {
	d       *xxhash.Digest
	size    int
	limit   int
	total   int
	inBlock int
	prev    blockHash
	hashes  []blockHash
}

func (c *chunker) write(s string) {
	for len(s) > 0 && c.total < c.limit {
		n := min(len(s), c.size-c.inBlock, c.limit-c.total)
		_, _ = c.d.WriteString(s[:n])
		s = s[n:]
		c.inBlock += n
		c.total += n
		if c.inBlock == c.size {
			var b [8]byte
			binary.LittleEndian.PutUint64(b[:], uint64(c.prev))
			_, _ = c.d.Write(b[:])
			c.prev = blockHash(c.d.Sum64())
			c.hashes = append(c.hashes, c.prev)
			c.d.Reset()
			c.inBlock = 0
		}
	}
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
	d := xxhash.New()
	_, _ = d.WriteString(request.TargetModel)
	if salt := request.Body.CacheSalt(); salt != "" {
		_, _ = d.WriteString(salt)
	}
	c := &chunker{d: d, size: size, limit: size * maxBlocks, prev: blockHash(d.Sum64())}
	d.Reset()
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
