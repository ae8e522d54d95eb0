package prefillpolicy

import (
	"encoding/binary"
	"sort"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
)

// refTable is the hash-chain prefix table PrefixTable replaced, kept as the reference model
// its differential tests and benchmarks compare against: the prompt's chained block hashes,
// (hash, pod) entries in two generations of Go maps.
//
// AIBrix's prefix hash table for the prefill policies: the prompt is split into
// blocks of blockSize characters (the "character" tokenizer), each block hash chains the
// previous one, and a pod holding the first i+1 blocks matches (i+1)·100/numBlocks percent
// (integer), scanning in order and stopping at the first miss. It holds at most maxBlocks
// (block, pod) entries; the oldest are forgotten first.
//
// Entries are (block hash, pod id) pairs folded into one 64-bit key, in two generations. Add
// writes into recent; when recent cannot take the next prompt within half the capacity, it
// becomes old and the previous old is dropped whole. So the table always holds the newest half
// of its capacity or more, eviction is O(1) (no scan, no sort, no copy), and memory stays at
// the entries themselves: 8-byte keys with no values, about 10 MB at the default 2^20 entries,
// on Go's fast path for 64-bit map keys (a 220 KB prompt is 55,000 blocks to record). (A map per
// hash cost ~1 KB per block; one flat map evicted by copying the newest half peaked at twice
// the table and sorted a million generations per eviction.)
type refTable struct {
	mu        sync.RWMutex
	blockSize int
	maxBlocks int
	recent    map[uint64]struct{}
	old       map[uint64]struct{} // nil when dropped with recent empty or too small
	podIDs
	rotations int
}

// blockKey folds a block hash and a pod id into one key. Block hashes are xxhash outputs, so
// two different (hash, pod) pairs share a key with probability 2^-64: a false match would only
// move one prefix score.
func blockKey(hash uint64, pod uint32) uint64 {
	return hash ^ (uint64(pod)+1)*0x9E3779B97F4A7C15
}

// newRefTable returns a table with the given block size (characters) and capacity
// ((block, pod) entries).
func newRefTable(blockSize, maxBlocks int) *refTable {
	if blockSize <= 0 {
		blockSize = 4
	}
	if maxBlocks <= 0 {
		maxBlocks = 1 << 20
	}
	return &refTable{blockSize: blockSize, maxBlocks: maxBlocks, recent: map[uint64]struct{}{}, podIDs: newPodIDs()}
}

// Hashes returns the chained block hashes of a prompt (an incomplete tail is not hashed).
// Each block hashes the previous hash (little endian) and the block's runes as UTF-8.
func (t *refTable) Hashes(prompt string) []uint64 {
	if t.blockSize <= maxASCIIBlock && isASCII(prompt) {
		return hashesASCII(prompt, t.blockSize)
	}
	n := utf8.RuneCountInString(prompt) / t.blockSize
	out := make([]uint64, 0, n)
	var prev uint64
	buf := make([]byte, 8, 8+4*t.blockSize)
	rest := prompt
	for i := 0; i < n; i++ {
		buf = buf[:8]
		binary.LittleEndian.PutUint64(buf, prev)
		// A block of valid UTF-8 is its own bytes: copy them. An invalid byte decodes to
		// U+FFFD, whose encoding differs from the byte, so such a block is re-encoded rune by
		// rune (what AIBrix's string-of-runes hashing sees).
		j, valid := 0, true
		for k := 0; k < t.blockSize; k++ {
			if c := rest[j]; c < utf8.RuneSelf {
				j++
				continue
			}
			r, size := utf8.DecodeRuneInString(rest[j:])
			if r == utf8.RuneError && size == 1 {
				valid = false
				break
			}
			j += size
		}
		if valid {
			buf = append(buf, rest[:j]...)
			rest = rest[j:]
		} else {
			for k := 0; k < t.blockSize; k++ {
				r, size := utf8.DecodeRuneInString(rest)
				rest = rest[size:]
				buf = utf8.AppendRune(buf, r)
			}
		}
		prev = xxhash.Sum64(buf)
		out = append(out, prev)
	}
	return out
}

// maxASCIIBlock is the largest block size the ASCII fast path hashes from a stack buffer.
const maxASCIIBlock = 32

// hashesASCII is Hashes for an ASCII prompt, where a rune is a byte: the same chain, without
// decoding runes (most prompts; a 220 KB prompt is 55,000 blocks).
func hashesASCII(prompt string, blockSize int) []uint64 {
	n := len(prompt) / blockSize
	out := make([]uint64, n)
	var buf [8 + maxASCIIBlock]byte
	var prev uint64
	for i := range out {
		binary.LittleEndian.PutUint64(buf[:8], prev)
		copy(buf[8:], prompt[i*blockSize:(i+1)*blockSize])
		prev = xxhash.Sum64(buf[:8+blockSize])
		out[i] = prev
	}
	return out
}

// Match returns each pod's match percent for the hashes.
//
// A block hash chains every block before it, and Add records a prompt's whole chain, so a pod
// holding block i holds blocks 0..i-1 too (up to a 2^-64 hash collision): a pod's matched
// length is found by binary search, in O(log blocks) lookups instead of one per block (a 220
// KB prompt is 55,000 blocks).
func (t *refTable) Match(hashes []uint64) map[string]float64 {
	out := map[string]float64{}
	if len(hashes) == 0 {
		return out
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	for id := range t.holders {
		if !t.has(hashes[0], id) {
			continue
		}
		n := sort.Search(len(hashes), func(i int) bool { return !t.has(hashes[i], id) })
		out[t.names[id]] = float64(n * 100 / len(hashes))
	}
	return out
}

func (t *refTable) has(h uint64, id uint32) bool {
	k := blockKey(h, id)
	if _, ok := t.recent[k]; ok {
		return true
	}
	_, ok := t.old[k]
	return ok
}

// Add records that pod now holds the hashes. The latest Add always stays whole, even one over
// the whole capacity (the table then holds that prompt alone).
func (t *refTable) Add(pod string, hashes []uint64) {
	if len(hashes) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.recent) > 0 && len(t.recent)+len(hashes) > max(t.maxBlocks/2, 1) {
		t.rotate()
	}
	if t.old != nil && len(t.old)+len(t.recent)+len(hashes) > t.maxBlocks {
		t.old = nil
		t.prune(false)
	}
	id := t.hold(pod)
	// The leading blocks recent already holds for the pod were recorded with their whole
	// chain: only the rest is written, so recent keeps every chain whole.
	held := sort.Search(len(hashes), func(i int) bool {
		_, ok := t.recent[blockKey(hashes[i], id)]
		return !ok
	})
	for _, h := range hashes[held:] {
		t.recent[blockKey(h, id)] = struct{}{}
	}
}

// rotate makes recent the old generation and drops the previous old one.
func (t *refTable) rotate() {
	t.rotations++
	t.old = t.recent
	// The next generation will likely fill as far as this one did.
	t.recent = make(map[uint64]struct{}, len(t.old))
	t.epoch++
	t.prune(t.old != nil)
}

// Len is the number of entries held (a prompt re-added while in the old generation counts
// twice until that generation is dropped).
func (t *refTable) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.recent) + len(t.old)
}

// Forget removes a pod (it left the pool): it is never matched again, and its entries go with
// their generation.
func (t *refTable) Forget(pod string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forget(pod)
}

// hashesReference is the block hash chain spelled out: xxhash of the previous hash (little
// endian) followed by the block's runes as a string.
func hashesReference(blockSize int, prompt string) []uint64 {
	runes := []rune(prompt)
	var out []uint64
	var prev uint64
	for i := 0; i+blockSize <= len(runes); i += blockSize {
		b := binary.LittleEndian.AppendUint64(nil, prev)
		prev = xxhash.Sum64(append(b, string(runes[i:i+blockSize])...))
		out = append(out, prev)
	}
	return out
}

func TestHashesAgreeWithReference(t *testing.T) {
	for _, prompt := range []string{"", "abc", "abcd", "hello world, a longer prompt!", "héllo wörld ✓ 日本語テキスト", "bad \xff\xfe utf8 \xc3"} {
		for _, bs := range []int{1, 4, 7} {
			got, want := newRefTable(bs, 10).Hashes(prompt), hashesReference(bs, prompt)
			if len(got) != len(want) {
				t.Fatalf("%q/%d: %d hashes, want %d", prompt, bs, len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%q/%d: hash %d differs", prompt, bs, i)
				}
			}
		}
	}
}
