// Package kvcache holds the simulator's prefix cache: chained block hashes over prompt
// tokens and an LRU of blocks sized from the KV capacity, like vLLM's automatic prefix
// caching (a block is reusable only when every block before it is too).
package kvcache

import (
	"container/list"
	"encoding/binary"
	"hash/fnv"
	"sync"
)

// BlockHashes returns one hash per full block of blockSize tokens; each hash covers the
// block's tokens and the previous block's hash, so equal hashes mean equal prefixes.
func BlockHashes(tokens []uint32, blockSize int) []uint64 {
	if blockSize <= 0 {
		return nil
	}
	n := len(tokens) / blockSize
	out := make([]uint64, 0, n)
	var prev uint64
	var buf [8]byte
	for b := 0; b < n; b++ {
		h := fnv.New64a()
		binary.LittleEndian.PutUint64(buf[:], prev)
		_, _ = h.Write(buf[:])
		for _, t := range tokens[b*blockSize : (b+1)*blockSize] {
			binary.LittleEndian.PutUint32(buf[:4], t)
			_, _ = h.Write(buf[:4])
		}
		prev = h.Sum64()
		out = append(out, prev)
	}
	return out
}

// PrefixCache is a block-hash LRU. It is safe for concurrent use.
type PrefixCache struct {
	mu       sync.Mutex
	capacity int
	order    *list.List // front = most recently used
	blocks   map[uint64]*list.Element
}

// NewPrefixCache holds at most capacityBlocks blocks (KV capacity / block size).
func NewPrefixCache(capacityBlocks int) *PrefixCache {
	return &PrefixCache{capacity: capacityBlocks, order: list.New(), blocks: map[uint64]*list.Element{}}
}

// Match returns how many leading blocks of hashes are cached and marks them used.
func (c *PrefixCache) Match(hashes []uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.leading(hashes)
	c.touchHeadLast(hashes[:n])
	return n
}

// Peek is Match without marking anything used: what a request would find, asked by an
// observer that must not change what the cache evicts next.
func (c *PrefixCache) Peek(hashes []uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leading(hashes)
}

func (c *PrefixCache) leading(hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		if _, ok := c.blocks[h]; !ok {
			break
		}
		n++
	}
	return n
}

// touchHeadLast marks the cached blocks of hashes used, the last block first, so that a
// sequence's leading blocks are the last of it to be evicted. A block is reusable only while
// every block before it is cached: evicting a prefix's head first would leave its tail
// cached and useless. vLLM frees a request's blocks in reverse order for the same reason, and
// SGLang's radix tree evicts leaves first.
func (c *PrefixCache) touchHeadLast(hashes []uint64) {
	for i := len(hashes) - 1; i >= 0; i-- {
		if e, ok := c.blocks[hashes[i]]; ok {
			c.order.MoveToFront(e)
		}
	}
}

// Insert caches every block of hashes, evicting the least recently used blocks when full.
func (c *PrefixCache) Insert(hashes []uint64) { c.insert(hashes, nil) }

// Len is the number of cached blocks.
func (c *PrefixCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// Op is one change InsertObserved made, in order: a block of hashes added (Index is its
// position in hashes) or a cached block evicted (Evicted is its hash).
type Op struct {
	Added   bool
	Index   int
	Evicted uint64
}

// InsertObserved is Insert, also returning the changes in the order they happened (the
// simulator publishes them as KV events).
func (c *PrefixCache) InsertObserved(hashes []uint64) []Op {
	var ops []Op
	c.insert(hashes, &ops)
	return ops
}

// insert is Insert, appending each change to *ops unless ops is nil (Insert runs on every
// simulated prefill and records nothing).
func (c *PrefixCache) insert(hashes []uint64, ops *[]Op) {
	if c.capacity <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, h := range hashes {
		if e, ok := c.blocks[h]; ok {
			c.order.MoveToFront(e)
			continue
		}
		for c.order.Len() >= c.capacity {
			last := c.order.Back()
			c.order.Remove(last)
			delete(c.blocks, last.Value.(uint64))
			if ops != nil {
				*ops = append(*ops, Op{Evicted: last.Value.(uint64)})
			}
		}
		c.blocks[h] = c.order.PushFront(h)
		if ops != nil {
			*ops = append(*ops, Op{Added: true, Index: i})
		}
	}
	c.touchHeadLast(hashes)
}
