package prefixproducer

import (
	"container/list"
	"sync"

	k8stypes "k8s.io/apimachinery/pkg/types"
)

// serverID names a server by its pod's namespaced name.
type serverID = k8stypes.NamespacedName

// index is GIE's prefix indexer: which servers may hold a block, with one LRU of block hashes
// per server (capacity: the server's GPU block count or the configured default); a block
// evicted from a server's LRU leaves that server's entry in the block → servers map.
type index struct {
	mu          sync.RWMutex
	hashToPods  map[blockHash]map[serverID]struct{}
	podToLRU    map[serverID]*lru
	defaultSize int
}

func newIndex(defaultSize int) *index {
	return &index{hashToPods: map[blockHash]map[serverID]struct{}{}, podToLRU: map[serverID]*lru{}, defaultSize: defaultSize}
}

// lru is a fixed-capacity LRU set of block hashes.
type lru struct {
	cap   int
	order *list.List // front = most recent; values are blockHash
	items map[blockHash]*list.Element
}

// add records hashes for server s (capacity on first sight: gpuBlocks, else the default).
func (x *index) add(hashes []blockHash, s serverID, gpuBlocks int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.podToLRU[s]
	if l == nil {
		c := gpuBlocks
		if c <= 0 {
			c = x.defaultSize
		}
		if c <= 0 {
			return // GIE's LRU cannot be built with size <= 0 either; nothing is recorded
		}
		l = &lru{cap: c, order: list.New(), items: map[blockHash]*list.Element{}}
		x.podToLRU[s] = l
	}
	for _, h := range hashes {
		if e, ok := l.items[h]; ok {
			l.order.MoveToFront(e)
			continue
		}
		l.items[h] = l.order.PushFront(h)
		if l.order.Len() > l.cap {
			old := l.order.Back()
			l.order.Remove(old)
			oh := old.Value.(blockHash)
			delete(l.items, oh)
			x.evict(oh, s)
		}
	}
	for _, h := range hashes {
		pods := x.hashToPods[h]
		if pods == nil {
			pods = map[serverID]struct{}{}
			x.hashToPods[h] = pods
		}
		pods[s] = struct{}{}
	}
}

func (x *index) evict(h blockHash, s serverID) {
	if pods, ok := x.hashToPods[h]; ok {
		delete(pods, s)
		if len(pods) == 0 {
			delete(x.hashToPods, h)
		}
	}
}

// matchLongestPrefix counts, per server, the leading blocks of hashes the index says it holds
// (GIE's greedy walk: it stops at the first block no server holds).
func (x *index) matchLongestPrefix(hashes []blockHash) map[serverID]int {
	res := map[serverID]int{}
	x.mu.RLock()
	defer x.mu.RUnlock()
	for _, h := range hashes {
		pods := x.hashToPods[h]
		if len(pods) == 0 {
			break
		}
		for s := range pods {
			res[s]++
		}
	}
	return res
}

// removePod forgets a server.
func (x *index) removePod(s serverID) {
	x.mu.Lock()
	defer x.mu.Unlock()
	l := x.podToLRU[s]
	if l == nil {
		return
	}
	for h := range l.items {
		x.evict(h, s)
	}
	delete(x.podToLRU, s)
}

// pods lists the servers tracked.
func (x *index) pods() []serverID {
	x.mu.RLock()
	defer x.mu.RUnlock()
	out := make([]serverID, 0, len(x.podToLRU))
	for s := range x.podToLRU {
		out = append(out, s)
	}
	return out
}

// size is the total number of entries over all servers' LRUs.
func (x *index) size() int {
	x.mu.RLock()
	defer x.mu.RUnlock()
	n := 0
	for _, l := range x.podToLRU {
		n += len(l.items)
	}
	return n
}
