package kvevents

import (
	"cmp"
	"container/list"
	"maps"
	"slices"
	"strings"
	"sync"

	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
)

// SourceKey names one event stream: an endpoint ("address:port", the key candidates are
// looked up by) and a data-parallel rank.
type SourceKey struct {
	Endpoint string
	Rank     int
}

// Skip reasons of stores that are not indexed (metric label values).
const (
	SkipBlockSize     = "block_size"     // the canonical block size does not divide the engine's
	SkipNotDense      = "not_dense"      // token_ids do not cover exactly the stored blocks
	SkipUnknownParent = "unknown_parent" // the parent block is not (or no longer) indexed
	SkipGroupKind     = "group_kind"     // a hybrid model's non-full-attention group
	SkipUnknownBlock  = "unknown_block"  // a token-less (tier) update of blocks never stored
)

// IndexConfig bounds and tunes an Index.
type IndexConfig struct {
	// BlockSize is the canonical block size in tokens (request keys).
	BlockSize int
	// HashSeed seeds the request-key chain.
	HashSeed string
	// MaxKeys bounds the distinct request keys held (llm-d's inMemoryConfig.size).
	MaxKeys int
	// MaxBlocksPerEndpoint bounds the engine blocks held per source; a source's least
	// recently stored block is evicted first.
	MaxBlocksPerEndpoint int
	// TierWeights weight a matched block by the best tier it is held in (lowercase names);
	// tiers not listed weigh 1.
	TierWeights map[string]float64
}

// Index records, per source, the request keys it holds, fed by events. It is safe for
// concurrent use: events of one source must be applied in order (one goroutine per source).
//
// Every holder of a key is recorded. llm-d's index keeps at most podCacheSize sources per key,
// and a prefix every pod holds (a shared system prompt) then lists only the first few: every
// other pod matches nothing past it, however much of the conversation it holds, and precise
// routing loses the session once the fleet outgrows podCacheSize.
type Index struct {
	cfg    IndexConfig
	keyer  Keyer
	mu     sync.RWMutex
	keys   map[uint64][]holder // request key → its holders, by source id
	nextID uint32
	srcs   map[SourceKey]*source
	tiers  []string // bit i of a tier mask = tiers[i]
	weight []float64
	loras  map[string]struct{}
	blocks int
	stats  *Metrics
}

// holder is one source holding a request key, in tiers (never 0).
type holder struct {
	id    uint32
	tiers uint16
}

type source struct {
	key    SourceKey
	id     uint32            // the order holders are kept in
	blocks map[uint64]*block // engine hash → block
	lru    list.List         // *block, front = most recently stored
}

type block struct {
	engine uint64
	keys   []uint64 // request keys (one per canonical sub-block), in order
	tiers  uint16
	elem   *list.Element
}

// NewIndex returns an empty index. Metrics may be nil.
func NewIndex(cfg IndexConfig, m *Metrics) *Index {
	if cfg.BlockSize <= 0 {
		cfg.BlockSize = 16
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = 1 << 24
	}
	if cfg.MaxBlocksPerEndpoint <= 0 {
		cfg.MaxBlocksPerEndpoint = 1 << 18
	}
	return &Index{cfg: cfg, keyer: NewKeyer(cfg.BlockSize, cfg.HashSeed), keys: map[uint64][]holder{},
		srcs: map[SourceKey]*source{}, loras: map[string]struct{}{}, stats: m}
}

// Keyer returns the index's request-key chain.
func (ix *Index) Keyer() Keyer { return ix.keyer }

// tierBit returns the bit of a tier, adding it (up to 16 tiers; later ones share the last).
// Callers hold ix.mu for writing.
func (ix *Index) tierBit(medium string) uint16 {
	name := kvwire.NormalizeTier(medium)
	for i, t := range ix.tiers {
		if t == name {
			return 1 << i
		}
	}
	if len(ix.tiers) == 16 {
		return 1 << 15
	}
	w, ok := ix.cfg.TierWeights[name]
	if !ok {
		w = 1
	}
	ix.tiers = append(ix.tiers, name)
	ix.weight = append(ix.weight, w)
	return 1 << (len(ix.tiers) - 1)
}

// Apply applies one batch of src's events in order.
func (ix *Index) Apply(src SourceKey, events []kvwire.Event) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	s := ix.srcs[src]
	if s == nil {
		ix.nextID++
		s = &source{key: src, id: ix.nextID, blocks: map[uint64]*block{}}
		ix.srcs[src] = s
	}
	for i := range events {
		ev := &events[i]
		switch ev.Kind {
		case kvwire.KindStored:
			ix.store(s, ev)
		case kvwire.KindRemoved:
			for _, h := range ev.Hashes {
				ix.remove(s, h, ix.tierBit(ev.Medium))
			}
		case kvwire.KindCleared:
			ix.clear(s)
		}
		if ix.stats != nil {
			ix.stats.Events.WithLabelValues(ev.Kind.String()).Inc()
		}
	}
	ix.report()
}

// Clear forgets everything src holds (a broken or restarted stream: never trust it stale).
func (ix *Index) Clear(src SourceKey) { ix.discard(src, false) }

// Forget removes src entirely (its endpoint left the pool).
func (ix *Index) Forget(src SourceKey) { ix.discard(src, true) }

// discard clears what src holds and, with forget, src itself.
func (ix *Index) discard(src SourceKey, forget bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if s := ix.srcs[src]; s != nil {
		ix.clear(s)
		if forget {
			delete(ix.srcs, src)
		}
	}
	ix.report()
}

func (ix *Index) report() {
	if ix.stats != nil {
		ix.stats.IndexBlocks.Set(float64(ix.blocks))
		ix.stats.IndexKeys.Set(float64(len(ix.keys)))
	}
}

func (ix *Index) skip(reason string) {
	if ix.stats != nil {
		ix.stats.StoresSkipped.WithLabelValues(reason).Inc()
	}
}

// maxKeysPerBlock bounds the request keys one engine block yields (engine block size /
// canonical block size): engines use blocks of at most a few hundred tokens, and a hostile
// block_size must not turn one block into millions of keys.
const maxKeysPerBlock = 256

var indexedKinds = map[string]bool{"": true, "full_attention": true, "mla_attention": true, "sink_full_attention": true}

func (ix *Index) store(s *source, ev *kvwire.Event) {
	if ev.HasGroup && !indexedKinds[ev.SpecKind] {
		ix.skip(SkipGroupKind)
		return
	}
	bit := ix.tierBit(ev.Medium)
	if len(ev.Tokens) == 0 {
		// An offload connector's tier update: the blocks are known by their engine hashes.
		for _, h := range ev.Hashes {
			b := s.blocks[h]
			if b == nil {
				ix.skip(SkipUnknownBlock)
				continue
			}
			ix.addTier(s, b, bit)
		}
		return
	}
	engineSize := ev.BlockSize
	if engineSize <= 0 && len(ev.Hashes) > 0 {
		engineSize = len(ev.Tokens) / len(ev.Hashes)
	}
	canon := ix.cfg.BlockSize
	if engineSize <= 0 || engineSize%canon != 0 || engineSize/canon > maxKeysPerBlock {
		ix.skip(SkipBlockSize)
		return
	}
	if len(ev.Tokens) != engineSize*len(ev.Hashes) {
		ix.skip(SkipNotDense)
		return
	}
	if ev.LoraName != "" {
		if _, ok := ix.loras[ev.LoraName]; !ok && len(ix.loras) < 4096 {
			ix.loras[ev.LoraName] = struct{}{}
		}
	}
	var parent uint64
	if ev.HasParent {
		pb := s.blocks[ev.Parent]
		if pb == nil || len(pb.keys) == 0 {
			ix.skip(SkipUnknownParent)
			return
		}
		parent = pb.keys[len(pb.keys)-1]
	} else {
		parent = ix.keyer.Root(ev.LoraName)
	}
	per := engineSize / canon
	buf := make([]byte, 0, 8+4*canon+32)
	for i, h := range ev.Hashes {
		var extras []string
		if i < len(ev.Extra) {
			for _, x := range ev.Extra[i] {
				if x != ev.LoraName {
					extras = append(extras, x)
				}
			}
		}
		if i == 0 && !ev.HasParent && ev.CacheSalt != "" {
			extras = append(extras, ev.CacheSalt)
		}
		keys := make([]uint64, per)
		for j := 0; j < per; j++ {
			var x []string
			if j == 0 {
				x = extras
			}
			off := (i*per + j) * canon
			parent, buf = ix.keyer.Block(buf, parent, ev.Tokens[off:off+canon], x)
			keys[j] = parent
		}
		if old := s.blocks[h]; old != nil {
			if slices.Equal(old.keys, keys) {
				s.lru.MoveToFront(old.elem)
				ix.addTier(s, old, bit)
				continue
			}
			ix.drop(s, old) // the engine reused the hash for other tokens: replace it
		}
		b := &block{engine: h, keys: keys}
		b.elem = s.lru.PushFront(b)
		s.blocks[h] = b
		ix.blocks++
		ix.addTier(s, b, bit)
		for len(s.blocks) > ix.cfg.MaxBlocksPerEndpoint || (len(ix.keys) > ix.cfg.MaxKeys && len(s.blocks) > 1) {
			ix.evictOldest(s)
		}
	}
}

func (ix *Index) evictOldest(s *source) {
	e := s.lru.Back()
	if e == nil {
		return
	}
	ix.drop(s, e.Value.(*block))
	if ix.stats != nil {
		ix.stats.Evictions.Inc()
	}
}

// addTier records that s holds b in the tier bit.
func (ix *Index) addTier(s *source, b *block, bit uint16) {
	b.tiers |= bit
	for _, k := range b.keys {
		hs := ix.keys[k]
		i, ok := findHolder(hs, s.id)
		if ok {
			hs[i].tiers |= bit
			continue
		}
		ix.keys[k] = slices.Insert(hs, i, holder{id: s.id, tiers: bit})
	}
}

// findHolder returns where source id is, or would be, in hs (sorted by id).
func findHolder(hs []holder, id uint32) (int, bool) {
	return slices.BinarySearchFunc(hs, id, func(h holder, id uint32) int { return cmp.Compare(h.id, id) })
}

func (ix *Index) remove(s *source, h uint64, bit uint16) {
	b := s.blocks[h]
	if b == nil {
		return
	}
	b.tiers &^= bit
	if b.tiers == 0 {
		ix.drop(s, b)
		return
	}
	for _, k := range b.keys {
		hs := ix.keys[k]
		if i, ok := findHolder(hs, s.id); ok {
			if hs[i].tiers &^= bit; hs[i].tiers == 0 {
				ix.unhold(k, hs, i)
			}
		}
	}
}

// unhold removes holder i of request key k.
func (ix *Index) unhold(k uint64, hs []holder, i int) {
	if hs = slices.Delete(hs, i, i+1); len(hs) == 0 {
		delete(ix.keys, k)
	} else {
		ix.keys[k] = hs
	}
}

// drop removes block b of s from the index.
func (ix *Index) drop(s *source, b *block) {
	for _, k := range b.keys {
		hs := ix.keys[k]
		if i, ok := findHolder(hs, s.id); ok {
			ix.unhold(k, hs, i)
		}
	}
	s.lru.Remove(b.elem)
	delete(s.blocks, b.engine)
	ix.blocks--
}

func (ix *Index) clear(s *source) {
	for e := s.lru.Front(); e != nil; {
		next := e.Next()
		ix.drop(s, e.Value.(*block))
		e = next
	}
}

// Match is what the index knows of one candidate for one request.
type Match struct {
	// Blocks is the number of leading request blocks the candidate holds, in any tier.
	Blocks int
	// Weighted sums, over those blocks, the weight of the best tier each is held in.
	Weighted float64
	// ByTier counts those blocks by the best tier each is held in.
	ByTier map[string]int
}

// Namespace returns the key namespace of a request for model: the model's name when events
// named it as a LoRA adapter, else "" (the base model).
func (ix *Index) Namespace(model string) string {
	if model == "" {
		return ""
	}
	ix.mu.RLock()
	_, ok := ix.loras[model]
	ix.mu.RUnlock()
	if ok {
		return model
	}
	return ""
}

// Lookup returns, per candidate, the longest run of leading keys it holds. Candidates the
// index has never heard of match nothing. The candidates still matching walk the keys
// together, sorted by source id like each key's holders: a key is one merge of the two lists,
// or a binary search per candidate when far fewer candidates than holders are left (a long
// prefix the whole fleet holds, asked about for a few candidates).
func (ix *Index) Lookup(keys []uint64, cands []SourceKey) []Match {
	out := make([]Match, len(cands))
	if len(keys) == 0 || len(cands) == 0 {
		return out
	}
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	// active is a candidate still matching; run counts the blocks matched since its tier mask
	// last changed (runs of keys share a mask: its best tier is resolved once per run).
	type active struct {
		id   uint32
		mask uint16
		best int16
		cand int32 // index into cands and out
		run  int32
		w    float64
	}
	flush := func(a *active) {
		if a.run > 0 && a.best >= 0 {
			m := &out[a.cand]
			if m.ByTier == nil {
				m.ByTier = make(map[string]int, 1)
			}
			m.ByTier[ix.tiers[a.best]] += int(a.run)
		}
		a.run = 0
	}
	live := make([]active, 0, len(cands))
	for i, c := range cands {
		if s := ix.srcs[c]; s != nil {
			live = append(live, active{id: s.id, cand: int32(i), best: -1})
		}
	}
	slices.SortFunc(live, func(a, b active) int { return cmp.Compare(a.id, b.id) })
	for _, k := range keys {
		if len(live) == 0 {
			break
		}
		hs := ix.keys[k]
		search := len(live)*8 < len(hs)
		n, j := 0, 0 // live[:n] still match after this key; j walks hs
		for x := range live {
			a := &live[x]
			var tiers uint16
			if search {
				if i, ok := findHolder(hs, a.id); ok {
					tiers = hs[i].tiers
				}
			} else {
				for j < len(hs) && hs[j].id < a.id {
					j++
				}
				if j < len(hs) && hs[j].id == a.id {
					tiers = hs[j].tiers
				}
			}
			if tiers == 0 {
				flush(a)
				continue
			}
			if tiers != a.mask {
				flush(a)
				a.mask = tiers
				best, w := ix.bestTierIndex(tiers)
				a.best, a.w = int16(best), w
			}
			a.run++
			m := &out[a.cand]
			m.Blocks++
			m.Weighted += a.w
			if n != x {
				live[n] = *a
			}
			n++
		}
		live = live[:n]
	}
	for i := range live {
		flush(&live[i])
	}
	return out
}

// bestTierIndex returns the index of the highest-weighted tier of a mask and its weight (-1
// and 0 for an empty mask).
func (ix *Index) bestTierIndex(mask uint16) (int, float64) {
	best, w := -1, -1.0
	for i := range ix.tiers {
		if mask&(1<<i) != 0 && ix.weight[i] > w {
			best, w = i, ix.weight[i]
		}
	}
	if best < 0 {
		return -1, 0
	}
	return best, w
}

// Size reports the blocks and distinct request keys held.
func (ix *Index) Size() (blocks, keys int) {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.blocks, len(ix.keys)
}

// Holds reports how many blocks src holds.
func (ix *Index) Holds(src SourceKey) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	if s := ix.srcs[src]; s != nil {
		return len(s.blocks)
	}
	return 0
}

// Sources lists the sources the index has.
func (ix *Index) Sources() []SourceKey {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return slices.Collect(maps.Keys(ix.srcs))
}

// EndpointOf returns the endpoint part of a topic "kv@<endpoint>@<model>" (the whole topic
// when it has another shape) and the model part.
func EndpointOf(topic string) (endpoint, model string) {
	parts := strings.Split(topic, "@")
	if len(parts) == 3 {
		return parts[1], parts[2]
	}
	return topic, ""
}
