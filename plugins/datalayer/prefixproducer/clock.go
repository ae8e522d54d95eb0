package prefixproducer

// blockClock is one server's record of the blocks it holds, in the order they were recorded,
// evicted by second chance (CLOCK): the oldest block goes first unless the server was given
// it again since it was recorded, in which case it moves to the newest end once. That keeps
// what GIE's per-server LRU keeps in every case the index meets (a block used again outlives
// blocks that were not), at a fraction of the memory traffic:
//
//   - the blocks are a ring of (hash, weight) pairs, read and written in order, so evicting
//     touches no random memory but the index's own entry for the block;
//   - whether a server holds a block, and whether it was given it again, are two bits of the
//     block's one entry in the index (index.go), so recording a block the server does not
//     hold is one map write, and one more when it is evicted.
//
// The LRU it replaces kept a map per server from hash to a linked entry: five random map
// accesses per recorded block once a server was full, which at 220 KB prompts (about 360
// recorded blocks on each of two servers per request) was the largest share of the EPP's CPU.
//
// Capacity is in blocks and an entry weighs the blocks it stands for: 1 for a block the index
// records one by one, more for a checkpoint that stands for the blocks since the previous
// recorded one (index.go, "sparse recording"), so a server holds as many prompt blocks as its
// GPU cache whatever the spacing. A block's weight follows from its position in the prompt
// alone, so a block given again keeps the weight it was recorded with.
type blockClock struct {
	capacity int
	used     int // sum of the held entries' weights
	ring     []clockEntry
	oldest   int // ring index of the oldest entry
	n        int // entries held
}

type clockEntry struct {
	hash   blockHash
	weight int32
}

func newBlockClock(capacity int) *blockClock { return &blockClock{capacity: capacity} }

// push records h as the newest entry.
func (c *blockClock) push(e clockEntry) {
	if c.n == len(c.ring) {
		grown := make([]clockEntry, max(64, 2*len(c.ring)))
		k := copy(grown, c.ring[c.oldest:])
		copy(grown[k:], c.ring[:c.oldest])
		c.ring, c.oldest = grown, 0
	}
	c.ring[(c.oldest+c.n)%len(c.ring)] = e
	c.n++
	c.used += int(e.weight)
}

// pop removes and returns the oldest entry; c.n must be > 0.
func (c *blockClock) pop() clockEntry {
	e := c.ring[c.oldest]
	c.oldest = (c.oldest + 1) % len(c.ring)
	c.n--
	c.used -= int(e.weight)
	return e
}

// over reports whether the weights exceed the capacity with more than one entry to evict
// (an entry heavier than the capacity stays alone, as in the LRU).
func (c *blockClock) over() bool { return c.used > c.capacity && c.n > 1 }

// each calls f for every entry, oldest first.
func (c *blockClock) each(f func(clockEntry)) {
	for i := range c.n {
		f(c.ring[(c.oldest+i)%len(c.ring)])
	}
}

// reset empties the record.
func (c *blockClock) reset() { c.ring, c.oldest, c.n, c.used = nil, 0, 0, 0 }
