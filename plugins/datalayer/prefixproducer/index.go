package prefixproducer

import (
	"maps"
	"math/bits"
	"slices"
	"sync"

	k8stypes "k8s.io/apimachinery/pkg/types"
)

// serverID names a server by its pod's namespaced name.
type serverID = k8stypes.NamespacedName

// index is GIE's prefix indexer: which servers may hold a block, with a record of each
// server's blocks (capacity: the server's GPU block count or the configured default) evicted
// oldest first, second chance for blocks given again (clock.go).
//
// Each tracked server owns a slot; the block → servers map is one table per 64 slots
// (table.go) whose value holds two bitmasks, so recording a new block allocates no per-block
// set and a lookup is one table access per 64 servers (GIE keeps a map of servers per block:
// at 220 KB prompts, hundreds of small maps made and dropped per request).
type index struct {
	mu          sync.RWMutex
	words       []*blockTable // words[w] bit b: slot 64w+b
	servers     map[serverID]*serverBlocks
	bySlot      []serverID // slot → server (zero value: free)
	free        []int      // released slots, reused first
	defaultSize int
	// order is add's scratch list of the blocks it records (under mu). add runs on a fresh
	// goroutine per request; a list on its stack (5 KB for the dense blocks) grew that
	// goroutine's 8 KB stack by a copy on most requests.
	order [][2]int
}

// slotBits are one block's entry for 64 slots: held, the servers that hold it; given, those
// given it again since it was recorded (its second chance, clock.go).
type slotBits struct{ held, given uint64 }

// Sparse recording. The index records and looks up every one of a prompt's first
// denseBlocks blocks (GIE's default cap: up to there matching is GIE's exactly), then one
// checkpoint every checkpointStride blocks, and the prompt's last block. Block hashes are
// chained, so holding block i stands for holding blocks 0..i: a checkpoint carries the weight
// of the blocks since the previous recorded one, both in the match count and in the server's
// capacity. Whole-prompt matching of a 220 KB prompt (3,400 blocks) then costs 360 index
// operations instead of 3,400, on the request path's CPU budget. Where the walk stops at a
// checkpoint, the blocks of the gap before it are probed from the far end, so the last block
// of an earlier prompt that this one extends (a chat's previous turn) is found exactly.
const (
	denseBlocks      = 256
	checkpointStride = 32
)

// recorded calls f for each block the index records or looks up in a prompt of n blocks, in
// order, with its weight (the blocks since the previous recorded one).
func recorded(n int, f func(i, weight int) bool) {
	prev := -1
	for i := 0; i < min(n, denseBlocks); i++ {
		if !f(i, 1) {
			return
		}
		prev = i
	}
	for i := denseBlocks - 1 + checkpointStride; i < n; i += checkpointStride {
		if !f(i, i-prev) {
			return
		}
		prev = i
	}
	if n > denseBlocks && prev != n-1 {
		f(n-1, n-1-prev)
	}
}

// serverBlocks is one server's slot and record of blocks.
type serverBlocks struct {
	slot  int
	clock *blockClock
}

func newIndex(defaultSize int) *index {
	return &index{servers: map[serverID]*serverBlocks{}, defaultSize: defaultSize}
}

// add records hashes for server s (capacity on first sight: capBlocks, else the default).
// The record takes the prompt's last block first and its first block last, so that a
// prefix's head is the last of it to be evicted, as in the engines: vLLM frees a request's
// blocks tail first and SGLang's radix tree evicts leaves first. Taken in order (GIE's way),
// the head went first and the index forgot whole prefixes the pod still held.
//
// A server's record takes capBlocks when it is first seen and again whenever reported says
// capBlocks is the server's own count: GIE sizes a record once, so a pod that took requests
// before its first scrape showed its cache kept autoTune's default for as long as it stayed in
// the pool, and two EPPs over the same pods could record for different capacities.
func (x *index) add(hashes []blockHash, s serverID, capBlocks int, reported bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.servers[s]
	if l != nil && reported && capBlocks > 0 {
		l.clock.capacity = capBlocks // a smaller one evicts at the next push
	}
	if l == nil {
		c := capBlocks
		if c <= 0 {
			c = x.defaultSize
		}
		if c <= 0 {
			return // GIE's LRU cannot be built with size <= 0 either; nothing is recorded
		}
		l = x.track(s, c)
	}
	word, bit := x.words[l.slot/64], uint64(1)<<(l.slot%64)
	order := x.order[:0]
	recorded(len(hashes), func(i, w int) bool { order = append(order, [2]int{i, w}); return true })
	x.order = order
	// A new block names s as it is recorded (one map write). Only when the record evicts past
	// the entries it held before this call (the clock is first in, first out) can it have
	// dropped one of this prompt's blocks, which must still name s afterwards (below).
	held, pops := l.clock.n, 0
	for k := len(order) - 1; k >= 0; k-- {
		h := hashes[order[k][0]]
		e := word.ref(h)
		if e.held&bit != 0 {
			e.given |= bit
			continue
		}
		e.held |= bit
		l.clock.push(clockEntry{hash: h, weight: int32(order[k][1])})
		for l.clock.over() {
			evictOldest(l.clock, word, bit)
			pops++
		}
	}
	if pops <= held {
		return
	}
	// As in GIE, the record takes the blocks first and then every block names s, so a prompt
	// longer than the capacity leaves its early blocks naming s though the record dropped them.
	for _, r := range order {
		word.ref(hashes[r[0]]).held |= bit
	}
}

// evictOldest drops the server's oldest block, or gives it its second chance: a block given
// again since it was recorded moves to the newest end instead, once.
func evictOldest(c *blockClock, word *blockTable, bit uint64) {
	old := c.pop()
	i := word.lookup(old.hash)
	if i == -1 {
		return
	}
	e := word.at(i)
	if e.given&bit != 0 {
		e.given &^= bit
		c.push(old)
		return
	}
	if e.held &^= bit; e.held == 0 && e.given == 0 {
		word.delAt(i)
	}
}

// track gives s a slot and a record of capacity c.
func (x *index) track(s serverID, c int) *serverBlocks {
	slot := len(x.bySlot)
	if n := len(x.free); n > 0 {
		slot, x.free = x.free[n-1], x.free[:n-1]
		x.bySlot[slot] = s
	} else {
		x.bySlot = append(x.bySlot, s)
	}
	for len(x.words) <= slot/64 {
		x.words = append(x.words, newBlockTable())
	}
	l := &serverBlocks{slot: slot, clock: newBlockClock(c)}
	x.servers[s] = l
	return l
}

// matchLongestPrefix counts, per server, the leading blocks of hashes the index says it holds
// (GIE's greedy walk over the recorded blocks: it stops at the first one no server holds; a
// checkpoint held counts its weight; at the stop, the gap before it is probed backwards).
func (x *index) matchLongestPrefix(hashes []blockHash) map[serverID]int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	counts := make([]int, len(x.bySlot))
	credit := func(h blockHash, n int) bool {
		held := false
		for w, word := range x.words {
			m := word.get(h).held
			held = held || m != 0
			for ; m != 0; m &= m - 1 {
				counts[64*w+bits.TrailingZeros64(m)] += n
			}
		}
		return held
	}
	recorded(len(hashes), func(i, w int) bool {
		if credit(hashes[i], w) {
			return true
		}
		prev := i - w
		for j := i - 1; j > prev; j-- {
			if credit(hashes[j], j-prev) {
				break
			}
		}
		return false
	})
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
	word, bit := x.words[l.slot/64], uint64(1)<<(l.slot%64)
	l.clock.each(func(old clockEntry) {
		i := word.lookup(old.hash)
		if i == -1 {
			return
		}
		e := word.at(i)
		if e.held, e.given = e.held&^bit, e.given&^bit; e.held == 0 && e.given == 0 {
			word.delAt(i)
		}
	})
	l.clock.reset()
	delete(x.servers, s)
	x.bySlot[l.slot] = serverID{}
	x.free = append(x.free, l.slot)
}

// pods lists the servers tracked.
func (x *index) pods() []serverID {
	x.mu.RLock()
	defer x.mu.RUnlock()
	return slices.Collect(maps.Keys(x.servers))
}

// size is the total number of entries over all servers' records.
func (x *index) size() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := 0
	for _, l := range x.servers {
		n += l.clock.n
	}
	return n
}
