package prefillpolicy

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// PrefixTable is AIBrix's prefix table for the prefill policies: the prompt is split into
// blocks of blockSize characters (the "character" tokenizer; an incomplete tail is not
// counted), and a pod holding the first i+1 blocks matches (i+1)·100/numBlocks percent
// (integer), stopping at the first block it lacks. It holds at most maxBlocks (block, pod)
// entries; the oldest are forgotten first.
//
// AIBrix keys each block by a hash chaining every block before it, so a pod "holds block i"
// exactly when it was recorded with a prompt whose first i+1 blocks equal the asked prompt's.
// The table stores that directly: each generation is a compressed byte trie over the recorded
// prompts' text (cut to whole blocks), each node listing the pods recorded with a prompt
// through it. A pod's match is the deepest point of the asked prompt's path that it holds,
// counted in whole blocks; recording a prompt walks its path and copies only the text past
// what the trie already holds. Both cost the bytes compared and copied plus a few nodes per
// stored prompt, not a map operation per block (a 220 KB prompt is 55,000 blocks).
//
// Capacity counts what the hash table counted: (block, pod) entries, a prompt recorded for a
// pod adding the blocks past the longest prefix the pod already holds in the recent
// generation. Add writes into recent; when recent cannot take the next prompt within half the
// capacity, it becomes old and the previous old is dropped whole. So the table always holds
// the newest half of its capacity or more and eviction is O(1). Memory is the stored text (4
// bytes a block for ASCII at the default block size, each distinct block once however many
// pods hold it) plus 60-120 bytes per stored prompt (a leaf and a split node).
type PrefixTable struct {
	mu        sync.RWMutex
	blockSize int
	maxBlocks int
	recent    *trie
	old       *trie // nil when dropped with recent empty or too small
	podIDs
	rotations int
}

// NewPrefixTable returns a table with the given block size (characters) and capacity
// ((block, pod) entries).
func NewPrefixTable(blockSize, maxBlocks int) *PrefixTable {
	if blockSize <= 0 {
		blockSize = 4
	}
	if maxBlocks <= 0 {
		maxBlocks = 1 << 20
	}
	return &PrefixTable{blockSize: blockSize, maxBlocks: maxBlocks, recent: newTrie(0), podIDs: newPodIDs()}
}

// Tokens returns the prompt's token count under the character tokenizer: its rune count, as
// utf8.RuneCountInString counts it (an invalid byte is one rune), in one pass that takes
// ASCII 32 bytes at a time: prompts are mostly ASCII, and a 220 KB one is counted several
// times faster than rune by rune.
func Tokens(prompt string) int {
	n, i := 0, 0
	for i < len(prompt) {
		if i+32 <= len(prompt) && (binary.LittleEndian.Uint64([]byte(prompt[i:i+8]))|binary.LittleEndian.Uint64([]byte(prompt[i+8:i+16]))|
			binary.LittleEndian.Uint64([]byte(prompt[i+16:i+24]))|binary.LittleEndian.Uint64([]byte(prompt[i+24:i+32])))&0x8080808080808080 == 0 {
			n, i = n+32, i+32
			continue
		}
		if i+8 <= len(prompt) && binary.LittleEndian.Uint64([]byte(prompt[i:i+8]))&0x8080808080808080 == 0 {
			n, i = n+8, i+8
			continue
		}
		if prompt[i] < utf8.RuneSelf {
			n, i = n+1, i+1
			continue
		}
		_, size := utf8.DecodeRuneInString(prompt[i:])
		n, i = n+1, i+size
	}
	return n
}

// Prompt is a prompt prepared for a PrefixTable: its text cut to whole blocks, each invalid
// UTF-8 byte replaced by U+FFFD (the rune it decodes to, so two different invalid bytes are the
// same character, as in AIBrix's string-of-runes blocks).
type Prompt struct {
	text   string
	blocks int
	ascii  bool
}

// Blocks is the number of whole blocks in the prompt.
func (p Prompt) Blocks() int { return p.blocks }

// Prompt prepares a prompt for Match and Add. An ASCII or valid UTF-8 prompt is not copied.
func (t *PrefixTable) Prompt(text string) Prompt {
	bs := t.blockSize
	if isASCII(text) {
		n := len(text) / bs
		return Prompt{text: text[:n*bs], blocks: n, ascii: true}
	}
	if !utf8.ValidString(text) {
		text = validUTF8(text)
	}
	runes := runeCount(text)
	n := runes / bs
	end := len(text)
	for range runes - n*bs { // the incomplete tail, fewer than bs runes
		_, size := utf8.DecodeLastRuneInString(text[:end])
		end -= size
	}
	return Prompt{text: text[:end], blocks: n}
}

// runeCount is utf8.RuneCountInString for valid UTF-8: the bytes that are not continuation
// bytes (10xxxxxx), counted eight at a time.
func runeCount(s string) int {
	cont, i := 0, 0
	for ; i+8 <= len(s); i += 8 {
		w := binary.LittleEndian.Uint64([]byte(s[i : i+8]))
		cont += bits.OnesCount64(w &^ (w << 1) & 0x8080808080808080)
	}
	for ; i < len(s); i++ {
		if s[i]&0xC0 == 0x80 {
			cont++
		}
	}
	return len(s) - cont
}

// validUTF8 replaces each byte that does not start a valid encoding with U+FFFD's encoding
// (strings.ToValidUTF8 would replace a run of them with one).
func validUTF8(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		if s[i] < utf8.RuneSelf {
			b.WriteByte(s[i])
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b.WriteString("\uFFFD")
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// isASCII reports whether s is all ASCII, eight bytes at a time.
func isASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		if binary.LittleEndian.Uint64([]byte(s[i:i+8]))&0x8080808080808080 != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// commonPrefix is the length of the longest common prefix of a and b, compared a chunk at a
// time (string equality is the runtime's vectorised memequal).
func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i+256 <= n && a[i:i+256] == b[i:i+256] {
		i += 256
	}
	for i+16 <= n && a[i:i+16] == b[i:i+16] {
		i += 16
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// trie is one generation: a compressed trie over the recorded prompts' bytes.
type trie struct {
	nodes   []node // nodes[0] is the root (empty label, never a child)
	entries int    // (block, pod) entries recorded in this generation
}

// node is an edge label and what hangs below it. Every recorded prompt ends at a node (an edge
// is split where one ends inside it), and pods lists the pods recorded with a prompt through
// or ending at the node: a pod listed at a node is listed at all its ancestors.
type node struct {
	label       string
	child, next int32 // first child, next sibling (0: none)
	pods        []uint32
}

func newTrie(capNodes int) *trie {
	return &trie{nodes: make([]node, 1, max(capNodes, 1))}
}

// step is a node the text entered on its way down: start is the text's offset at the node's
// label, depth how far the text matched into it (start+len(label) when full).
type step struct {
	node         int32
	start, depth int
}

// walk follows text from the root and appends the nodes it enters to path, the last one
// possibly entered partway.
func (g *trie) walk(text string, path []step) []step {
	cur, pos := int32(0), 0
	for pos < len(text) {
		c := g.nodes[cur].child
		for c != 0 && g.nodes[c].label[0] != text[pos] {
			c = g.nodes[c].next
		}
		if c == 0 {
			break
		}
		label := g.nodes[c].label
		k := commonPrefix(label, text[pos:])
		path = append(path, step{node: c, start: pos, depth: pos + k})
		if k < len(label) {
			break
		}
		cur, pos = c, pos+k
	}
	return path
}

// blocksAt is the number of whole blocks of p within its first depth bytes, where depth is how
// far p's text agrees with a stored text (possibly into a multibyte rune whose later bytes
// differ: that rune is not common).
func (t *PrefixTable) blocksAt(p Prompt, depth int) int {
	if p.ascii {
		return depth / t.blockSize
	}
	if depth == len(p.text) {
		return p.blocks
	}
	for depth > 0 && !utf8.RuneStart(p.text[depth]) {
		depth--
	}
	return runeCount(p.text[:depth]) / t.blockSize
}

// Match returns each pod's match percent for the prompt.
func (t *PrefixTable) Match(p Prompt) map[string]float64 {
	out := map[string]float64{}
	t.MatchInto(out, p)
	return out
}

// MatchInto is Match into out, for a caller that reuses a map; out must be empty.
func (t *PrefixTable) MatchInto(out map[string]float64, p Prompt) {
	if p.blocks == 0 {
		return
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	depth := make([]int, len(t.names)) // pod id → deepest byte of p held (both generations)
	var buf [32]step
	for _, g := range [2]*trie{t.old, t.recent} {
		if g == nil {
			continue
		}
		for _, s := range g.walk(p.text, buf[:0]) {
			for _, id := range g.nodes[s.node].pods {
				depth[id] = max(depth[id], s.depth)
			}
		}
	}
	type held struct{ id, depth int }
	var found []held
	for id, d := range depth {
		if _, ok := t.holders[uint32(id)]; ok && d > 0 {
			found = append(found, held{id, d})
		}
	}
	if !p.ascii && len(found) > 1 {
		// Count runes once, up the pods' depths in order.
		slices.SortFunc(found, func(a, b held) int { return a.depth - b.depth })
		at, runes := 0, 0
		for _, h := range found {
			d := h.depth
			for d > 0 && d < len(p.text) && !utf8.RuneStart(p.text[d]) {
				d--
			}
			if d > at {
				runes += runeCount(p.text[at:d])
				at = d
			}
			if n := runes / t.blockSize; n > 0 {
				out[t.names[h.id]] = float64(n * 100 / p.blocks)
			}
		}
		return
	}
	for _, h := range found {
		if n := t.blocksAt(p, h.depth); n > 0 {
			out[t.names[h.id]] = float64(n * 100 / p.blocks)
		}
	}
}

// Add records that pod now holds the prompt's blocks. The latest Add always stays whole, even
// one over the whole capacity (the table then holds that prompt alone).
func (t *PrefixTable) Add(pod string, p Prompt) {
	if p.blocks == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.recent.entries > 0 && t.recent.entries+p.blocks > max(t.maxBlocks/2, 1) {
		t.rotate()
	}
	if t.old != nil && t.old.entries+t.recent.entries+p.blocks > t.maxBlocks {
		t.old = nil
		t.prune(false)
	}
	id := t.hold(pod)
	g := t.recent
	var buf [32]step
	path := g.walk(p.text, buf[:0])
	// The blocks the pod already holds in recent are not entries again.
	heldDepth := 0
	for _, s := range path {
		if slices.Contains(g.nodes[s.node].pods, id) {
			heldDepth = s.depth
		}
	}
	g.entries += p.blocks - t.blocksAt(p, heldDepth)

	pos := 0
	cur := int32(0)
	if n := len(path); n > 0 {
		last := path[n-1]
		cur, pos = last.node, last.depth
		if k := last.depth - last.start; k < len(g.nodes[cur].label) {
			// The text leaves (or ends) inside the edge: split it where.
			lower := node{label: g.nodes[cur].label[k:], child: g.nodes[cur].child,
				pods: slices.Clone(g.nodes[cur].pods)}
			g.nodes = append(g.nodes, lower)
			g.nodes[cur].label = g.nodes[cur].label[:k]
			g.nodes[cur].child = int32(len(g.nodes) - 1)
		}
	}
	if pos < len(p.text) {
		// Copy only the new text, so the table keeps none of the caller's prompt.
		leaf := node{label: strings.Clone(p.text[pos:]), next: g.nodes[cur].child}
		g.nodes = append(g.nodes, leaf)
		g.nodes[cur].child = int32(len(g.nodes) - 1)
		path = append(path, step{node: int32(len(g.nodes) - 1)})
	}
	// Mark the path, deepest first, up to the first node the pod already holds (its
	// ancestors hold it too).
	for i := len(path) - 1; i >= 0; i-- {
		nd := &g.nodes[path[i].node]
		if slices.Contains(nd.pods, id) {
			break
		}
		nd.pods = append(nd.pods, id)
	}
}

// rotate makes recent the old generation and drops the previous old one.
func (t *PrefixTable) rotate() {
	t.rotations++
	t.old = t.recent
	// The next generation will likely grow as far as this one did.
	t.recent = newTrie(len(t.old.nodes))
	t.epoch++
	t.prune(t.old != nil)
}

// Len is the number of (block, pod) entries held (a prompt re-added while in the old
// generation counts twice until that generation is dropped).
func (t *PrefixTable) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	n := t.recent.entries
	if t.old != nil {
		n += t.old.entries
	}
	return n
}

// Forget removes a pod (it left the pool): it is never matched again, and its entries go with
// their generation.
func (t *PrefixTable) Forget(pod string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.forget(pod)
}
