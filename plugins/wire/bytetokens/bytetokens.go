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
	"strings"
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
// text keeps nil token ids). The new room is not zeroed: the packer writes every token before
// it counts it in Tokens' length.
func (p *Packer) Grow(n int) {
	if n > 0 {
		p.Tokens = grow(p.Tokens, n/BytesPerToken+1)
	}
}

// grow is slices.Grow(tokens, n) without zeroing the new capacity. slices.Grow clears it, and
// a prompt's token slice is then written in full right after: for a 220 KB prompt that is a
// second pass over 220 KB of freshly allocated memory. strings.Builder's Grow is the standard
// library's only exported allocation that skips the clearing. Its buffer is viewed as tokens;
// the bytes of tokens are copied verbatim, so the ids are the same on any byte order.
func grow(tokens []uint32, n int) []uint32 {
	if cap(tokens)-len(tokens) >= n {
		return tokens
	}
	size := (len(tokens) + n) * BytesPerToken
	var b strings.Builder
	b.Grow(size) // guarantees cap >= size in one allocation
	b.WriteString(unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(tokens))), len(tokens)*BytesPerToken))
	// One more byte (beyond the copy, inside the room) so the buffer is non-empty and
	// String's data pointer is its start; it is garbage like the rest of the room.
	b.WriteByte(0)
	ptr := unsafe.StringData(b.String())
	if uintptr(unsafe.Pointer(ptr))%unsafe.Alignof(uint32(0)) != 0 {
		// The allocator aligns a buffer of 4 bytes or more to at least 8; should that ever
		// change, clear as slices.Grow does rather than misalign the tokens.
		return slices.Grow(tokens, n)
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(ptr)), size/BytesPerToken)[:len(tokens)]
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
	if need := whole / BytesPerToken; cap(p.Tokens)-n < need {
		// Amortized as append grows: double a small slice, add a quarter to a large one.
		p.Tokens = grow(p.Tokens, max(need, n/4, min(n, 256), 4))
	}
	p.Tokens = p.Tokens[:n+whole/BytesPerToken]
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
	p.Tokens = grow(p.Tokens, n)
	for i := 0; i < n; i++ {
		p.Tokens = append(p.Tokens, tok)
	}
}

// TextInOrder reports whether tokens hold their text's bytes in order in memory (a
// little-endian machine), which PackedText needs.
func TextInOrder() bool { return littleEndian }

// PackedText returns the bytes tokens were packed from, each message's or item's zero padding
// included, as a string that aliases tokens (no copy): comparing a text with it proves the
// text packs to those tokens. ok is false where TextInOrder is false. The string is valid
// while tokens[:len] is not written.
func PackedText(tokens []uint32) (text string, ok bool) {
	if !littleEndian {
		return "", false
	}
	return unsafe.String((*byte)(unsafe.Pointer(unsafe.SliceData(tokens))), len(tokens)*BytesPerToken), true
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
