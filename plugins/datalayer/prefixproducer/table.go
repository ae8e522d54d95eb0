package prefixproducer

import (
	"math/bits"
	"math/rand/v2"
)

// blockTable maps a block hash to its slotBits: an open-addressing table with linear probing
// and backward-shift deletion, in place of a Go map. The index's hot path is a stream of
// random accesses to a table of tens of thousands of blocks, each a cache miss: recording a
// block, and evicting an old one, whose entry nobody touched since it was recorded. A Go map
// reads a group's control word and then the slot, two lines apart, and needs a second probe
// to store or delete what it just read. Here an entry's key and bits share one 24-byte slot,
// and ref and del act where the lookup stopped: one probe per access, mostly one line.
//
// Keys are xxhash outputs of client-chosen text, so they are mixed with a per-table random
// seed before they pick a slot: a client cannot aim many blocks at one run of slots.
type blockTable struct {
	slots []tableSlot
	shift uint8 // 64 - log2(len(slots))
	n     int   // entries held (the zero key's included)
	seed  uint64
	// The zero hash marks a free slot, so the block whose hash is 0 lives here.
	zero    slotBits
	hasZero bool
}

type tableSlot struct {
	key blockHash
	val slotBits
}

const minTableSlots = 64

func newBlockTable() *blockTable {
	return &blockTable{slots: make([]tableSlot, minTableSlots), shift: 64 - 6, seed: rand.Uint64() | 1}
}

// home is the slot where the probe for h starts (Fibonacci hashing of the seeded key).
func (t *blockTable) home(h blockHash) int {
	return int(((uint64(h) ^ t.seed) * 0x9e3779b97f4a7c15) >> t.shift)
}

// get returns h's entry (zero when absent).
func (t *blockTable) get(h blockHash) slotBits {
	if h == 0 {
		return t.zero
	}
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		switch s := &t.slots[i]; s.key {
		case h:
			return s.val
		case 0:
			return slotBits{}
		}
	}
}

// ref returns h's entry, added as zero when absent. The pointer is valid until the next ref
// or del.
func (t *blockTable) ref(h blockHash) *slotBits {
	if h == 0 {
		if !t.hasZero {
			t.hasZero = true
			t.n++
		}
		return &t.zero
	}
	if 4*(t.n+1) > 3*len(t.slots) {
		t.grow()
	}
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.key == h {
			return &s.val
		}
		if s.key == 0 {
			s.key = h
			t.n++
			return &s.val
		}
	}
}

// lookup returns h's slot index, or -1 when absent (the zero key: -2 when present).
func (t *blockTable) lookup(h blockHash) int {
	if h == 0 {
		if t.hasZero {
			return -2
		}
		return -1
	}
	mask := len(t.slots) - 1
	for i := t.home(h); ; i = (i + 1) & mask {
		switch t.slots[i].key {
		case h:
			return i
		case 0:
			return -1
		}
	}
}

// at is the entry of a slot index lookup returned (not -1).
func (t *blockTable) at(i int) *slotBits {
	if i == -2 {
		return &t.zero
	}
	return &t.slots[i].val
}

// delAt removes the entry of a slot index lookup returned (not -1), moving back the entries
// after it whose probe passed through it, so no tombstone is left.
func (t *blockTable) delAt(i int) {
	t.n--
	if i == -2 {
		t.hasZero, t.zero = false, slotBits{}
		return
	}
	mask := len(t.slots) - 1
	for j := (i + 1) & mask; t.slots[j].key != 0; j = (j + 1) & mask {
		// The entry at j may fill the hole at i unless its home lies cyclically in (i, j].
		if k := t.home(t.slots[j].key); (j-k)&mask >= (j-i)&mask {
			t.slots[i] = t.slots[j]
			i = j
		}
	}
	t.slots[i] = tableSlot{}
}

// del removes h's entry if present.
func (t *blockTable) del(h blockHash) {
	if i := t.lookup(h); i != -1 {
		t.delAt(i)
	}
}

// len is the number of entries.
func (t *blockTable) len() int { return t.n }

func (t *blockTable) grow() {
	old := t.slots
	t.slots = make([]tableSlot, 2*len(old))
	t.shift = uint8(64 - bits.TrailingZeros(uint(len(t.slots))))
	mask := len(t.slots) - 1
	for _, s := range old {
		if s.key == 0 {
			continue
		}
		i := t.home(s.key)
		for t.slots[i].key != 0 {
			i = (i + 1) & mask
		}
		t.slots[i] = s
	}
}
