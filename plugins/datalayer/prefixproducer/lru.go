package prefixproducer

// blockLRU is one server's LRU of block hashes, built without pointers: entries live in
// one slice linked by int32 positions and the map holds positions, so the garbage collector
// has nothing in it to scan. An entry keeps its hash and both links together: evicting touches
// two entries (the oldest and its neighbour), one cache line each, in an index too large for
// the CPU's caches.
//
// That is why it is not hashicorp/golang-lru (used before): its entries are heap nodes linked
// by pointers, and a full index (31,250 blocks per server, GIE's default, times the pool) is
// hundreds of thousands of objects that every GC cycle marks again. At 220 KB prompts each
// request allocates ~0.7 MB (its body, decoded prompt and token estimate), so cycles are
// frequent, and marking the index took about a third of the EPP's CPU. The behaviour is the
// same: TestBlockLRUMatchesSimpleLRU drives both with one random sequence.
//
// Capacity is in blocks and an entry weighs the blocks it stands for: 1 for a block the index
// records one by one, more for a checkpoint that stands for the blocks since the previous
// recorded one (index.go, "sparse recording"), so a server's LRU holds as many prompt blocks
// as its GPU cache whatever the spacing.
type blockLRU struct {
	capacity   int
	used       int                 // sum of the entries' weights
	at         map[blockHash]int32 // hash → position in entries
	entries    []lruEntry
	free       []int32 // positions of evicted entries, reused first
	head, tail int32   // most / least recently used position; none when empty
	evicted    func(blockHash)
}

type lruEntry struct {
	hash       blockHash
	weight     int32
	prev, next int32 // towards the most / least recently used; none at the ends
}

const none int32 = -1

// newBlockLRU returns an empty LRU of capacity > 0; evicted is called for every entry that
// leaves it (by eviction or purge).
func newBlockLRU(capacity int, evicted func(blockHash)) *blockLRU {
	return &blockLRU{capacity: capacity, at: map[blockHash]int32{}, head: none, tail: none, evicted: evicted}
}

// add makes h the most recently used entry of weight 1, evicting the least recently used
// ones when full.
func (l *blockLRU) add(h blockHash) { l.addWeighted(h, 1) }

// addWeighted makes h the most recently used entry, of weight w (>= 1; an entry already there
// takes the new weight), evicting the least recently used ones until the weights fit the
// capacity (an entry heavier than the capacity stays alone).
func (l *blockLRU) addWeighted(h blockHash, w int) {
	if i, ok := l.at[h]; ok {
		if i != l.head {
			l.unlink(i)
			l.pushFront(i)
		}
		l.used += w - int(l.entries[i].weight)
		l.entries[i].weight = int32(w)
		for l.used > l.capacity && l.tail != i {
			l.evictTail()
		}
		return
	}
	for l.used+w > l.capacity && l.tail != none {
		l.evictTail()
	}
	var i int32
	if n := len(l.free); n > 0 {
		i, l.free = l.free[n-1], l.free[:n-1]
		l.entries[i] = lruEntry{hash: h, weight: int32(w)}
	} else {
		i = int32(len(l.entries))
		l.entries = append(l.entries, lruEntry{hash: h, weight: int32(w)})
	}
	l.used += w
	l.at[h] = i
	l.pushFront(i)
}

// evictTail drops the least recently used entry.
func (l *blockLRU) evictTail() {
	i := l.tail
	old := l.entries[i].hash
	l.unlink(i)
	delete(l.at, old)
	l.used -= int(l.entries[i].weight)
	l.free = append(l.free, i)
	l.evicted(old)
}

func (l *blockLRU) unlink(i int32) {
	p, n := l.entries[i].prev, l.entries[i].next
	if p == none {
		l.head = n
	} else {
		l.entries[p].next = n
	}
	if n == none {
		l.tail = p
	} else {
		l.entries[n].prev = p
	}
}

func (l *blockLRU) pushFront(i int32) {
	l.entries[i].prev, l.entries[i].next = none, l.head
	if l.head != none {
		l.entries[l.head].prev = i
	}
	l.head = i
	if l.tail == none {
		l.tail = i
	}
}

// purge empties the LRU, reporting every entry as evicted.
func (l *blockLRU) purge() {
	for i := l.head; i != none; i = l.entries[i].next {
		l.evicted(l.entries[i].hash)
	}
	l.at = map[blockHash]int32{}
	l.entries, l.free, l.used = nil, nil, 0
	l.head, l.tail = none, none
}

// len is the number of entries.
func (l *blockLRU) len() int { return len(l.at) }

// recency lists the entries from the most to the least recently used (tests).
func (l *blockLRU) recency() []blockHash {
	var out []blockHash
	for i := l.head; i != none; i = l.entries[i].next {
		out = append(out, l.entries[i].hash)
	}
	return out
}
