package prefixproducer

import (
	"math/bits"
	"sync"

	k8stypes "k8s.io/apimachinery/pkg/types"
)

// serverID names a server by its pod's namespaced name.
type serverID = k8stypes.NamespacedName

// index is GIE's prefix indexer: which servers may hold a block, with one LRU of block hashes
// per server (capacity: the server's GPU block count or the configured default).
//
// Each tracked server owns a slot; the block → servers map is one map per 64 slots whose
// value is a bitmask, so recording a new block allocates no per-block set and a lookup is one
// map access per 64 servers (GIE keeps a map of servers per block: at 220 KB prompts,
// hundreds of small maps made and dropped per request).
type index struct {
	mu          sync.RWMutex
	words       []map[blockHash]uint64 // words[w] bit b: slot 64w+b holds the block
	servers     map[serverID]*serverLRU
	bySlot      []serverID // slot → server (zero value: free)
	free        []int      // released slots, reused first
	defaultSize int
}

// serverLRU is one server's LRU of block hashes; eviction clears its slot's bit.
type serverLRU struct {
	slot  int
	cache *blockLRU
}

func newIndex(defaultSize int) *index {
	return &index{servers: map[serverID]*serverLRU{}, defaultSize: defaultSize}
}

// add records hashes for server s (capacity on first sight: gpuBlocks, else the default).
// As in GIE, the LRU takes the hashes first and then every hash names s, so a prompt longer
// than the LRU leaves its early blocks naming s though the LRU dropped them.
func (x *index) add(hashes []blockHash, s serverID, gpuBlocks int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.servers[s]
	if l == nil {
		c := gpuBlocks
		if c <= 0 {
			c = x.defaultSize
		}
		if c <= 0 {
			return // GIE's LRU cannot be built with size <= 0 either; nothing is recorded
		}
		l = x.track(s, c)
	}
	word, bit := x.words[l.slot/64], uint64(1)<<(l.slot%64)
	for _, h := range hashes {
		l.cache.add(h)
	}
	for _, h := range hashes {
		word[h] |= bit
	}
}

// track gives s a slot and an LRU of capacity c.
func (x *index) track(s serverID, c int) *serverLRU {
	slot := len(x.bySlot)
	if n := len(x.free); n > 0 {
		slot, x.free = x.free[n-1], x.free[:n-1]
		x.bySlot[slot] = s
	} else {
		x.bySlot = append(x.bySlot, s)
	}
	for len(x.words) <= slot/64 {
		x.words = append(x.words, map[blockHash]uint64{})
	}
	word, bit := x.words[slot/64], uint64(1)<<(slot%64)
	cache := newBlockLRU(c, func(h blockHash) {
		if v := word[h] &^ bit; v == 0 {
			delete(word, h)
		} else {
			word[h] = v
		}
	})
	l := &serverLRU{slot: slot, cache: cache}
	x.servers[s] = l
	return l
}

// matchLongestPrefix counts, per server, the leading blocks of hashes the index says it holds
// (GIE's greedy walk: it stops at the first block no server holds).
func (x *index) matchLongestPrefix(hashes []blockHash) map[serverID]int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	counts := make([]int, len(x.bySlot))
	for _, h := range hashes {
		held := false
		for w, word := range x.words {
			m := word[h]
			held = held || m != 0
			for ; m != 0; m &= m - 1 {
				counts[64*w+bits.TrailingZeros64(m)]++
			}
		}
		if !held {
			break
		}
	}
	res := map[serverID]int{}
	for slot, n := range counts {
		if n > 0 {
			res[x.bySlot[slot]] = n
		}
	}
	return res
}

// removePod forgets a server.
func (x *index) removePod(s serverID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.servers[s]
	if l == nil {
		return
	}
	l.cache.purge() // clears the slot's bit on every block
	delete(x.servers, s)
	x.bySlot[l.slot] = serverID{}
	x.free = append(x.free, l.slot)
}

// pods lists the servers tracked.
func (x *index) pods() []serverID {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]serverID, 0, len(x.servers))
	for s := range x.servers {
		out = append(out, s)
	}
	return out
}

// size is the total number of entries over all servers' LRUs.
func (x *index) size() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := 0
	for _, l := range x.servers {
		n += l.cache.len()
	}
	return n
}
