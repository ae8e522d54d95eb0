// Package bytetokens is the deterministic "tokenizer" pdgate's simulator and the EPP's
// tokenizer-free estimate share, so that the token ids the EPP derives for a request are the
// ids a simulated engine caches and reports in its KV events (precise prefix routing keys
// blocks by token ids: a single differing byte before a block changes every block after it).
//
// The model is a real vLLM: apply the chat template, then tokenize. Here:
//
//   - Tokenizer: the text is packed into 4-byte little-endian words, one word per token (llm-d's
//     tokenizer-free estimate); the last unfinished word is padded with zero bytes.
//   - Completions: the prompt text, tokenized.
//   - Chat template: the JSON of the request's tools (compact, object keys sorted, as Go's
//     encoding/json writes a decoded value) when it has any, then for each message its role
//     followed by its content (the raw string, or its text parts in order), with no separator.
//     Each message starts on a token boundary (the text before it is flushed), as a real
//     template's special tokens separate messages: the tokens of a conversation's first k
//     messages are then the same whatever follows, so a follow-up turn can reuse its history's
//     tokens and pack only its new messages. A multimodal item starts on a token boundary as
//     well and is a run of copies of one placeholder token.
//
// Both sides call the same Packer in the same order (ChatMessage per message), so the ids are
// equal by construction; the simulator's render endpoint (vLLM's /v1/chat/completions/render)
// returns them too.
package bytetokens

import (
	"encoding/binary"
	"slices"
	"unsafe"
)

// littleEndian reports whether uint32s are stored least significant byte first here.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// BytesPerToken is the width of one pseudo-token.
const BytesPerToken = 4

// Packer accumulates pseudo-tokens. Text is packed as it arrives (one linear pass, no copy of
// the prompt): only the up to three bytes of an unfinished word wait until more text or a
// Flush completes it. The zero value is ready to use.
type Packer struct {
	// Tokens are the ids packed so far (call Flush before reading the last partial word).
	Tokens []uint32
	pend   [BytesPerToken]byte
	npend  int
}

// Grow reserves room for n more bytes of text (nothing when n is 0, so a request without
// text keeps nil token ids).
func (p *Packer) Grow(n int) {
	if n > 0 {
		p.Tokens = slices.Grow(p.Tokens, n/BytesPerToken+1)
	}
}

// Text appends s to the token stream.
func (p *Packer) Text(s string) { pack(p, s) }

// Bytes appends b to the token stream.
func (p *Packer) Bytes(b []byte) { pack(p, b) }

// ChatMessage appends one message of the chat template on a token boundary: its role, then
// its content text. Messages whose content has several parts call Text for each further text
// part.
func (p *Packer) ChatMessage(role, content string) {
	p.Flush()
	pack(p, role)
	pack(p, content)
}

// pack completes a pending word first, then packs whole words straight from s and keeps the
// tail pending.
func pack[S string | []byte](p *Packer, s S) {
	if p.npend > 0 {
		n := copy(p.pend[p.npend:], s)
		p.npend += n
		s = s[n:]
		if p.npend < BytesPerToken {
			return
		}
		p.Tokens = append(p.Tokens, binary.LittleEndian.Uint32(p.pend[:]))
		p.npend = 0
	}
	whole := len(s) &^ (BytesPerToken - 1)
	// Extend once, then fill: a token is its four bytes read little-endian, so on a
	// little-endian machine the ids are the text's bytes as they are, and one copy fills them
	// (a 220 KB prompt in microseconds instead of 55,000 shifts and ors).
	n := len(p.Tokens)
	p.Tokens = slices.Grow(p.Tokens, whole/BytesPerToken)[:n+whole/BytesPerToken]
	out := p.Tokens[n:]
	switch {
	case len(out) == 0:
	case littleEndian:
		copy(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), whole), s[:whole])
	default:
		for j := range out {
			i := j * BytesPerToken
			out[j] = uint32(s[i]) | uint32(s[i+1])<<8 | uint32(s[i+2])<<16 | uint32(s[i+3])<<24
		}
	}
	p.npend = copy(p.pend[:], s[whole:])
}

// Flush ends the text so far: an unfinished word is padded with zero bytes.
func (p *Packer) Flush() {
	if p.npend == 0 {
		return
	}
	clear(p.pend[p.npend:])
	p.Tokens = append(p.Tokens, binary.LittleEndian.Uint32(p.pend[:]))
	p.npend = 0
}

// Repeat flushes the text, then appends n copies of tok (a multimodal item's placeholder).
func (p *Packer) Repeat(tok uint32, n int) {
	p.Flush()
	p.Tokens = slices.Grow(p.Tokens, n)
	for i := 0; i < n; i++ {
		p.Tokens = append(p.Tokens, tok)
	}
}

// Tokenize returns the pseudo-tokens of b appended to dst (a completion prompt).
func Tokenize(dst []uint32, b []byte) []uint32 {
	p := Packer{Tokens: dst}
	p.Bytes(b)
	p.Flush()
	return p.Tokens
}

// ItemHash is the 64-bit FNV-1a of a multimodal item's content and its placeholder token (the
// two halves folded).
func ItemHash(content string) (sum uint64, tok uint32) {
	const offset64, prime64 = 14695981039346656037, 1099511628211
	h := uint64(offset64)
	for i := 0; i < len(content); i++ {
		h ^= uint64(content[i])
		h *= prime64
	}
	return h, uint32(h) ^ uint32(h>>32)
}
