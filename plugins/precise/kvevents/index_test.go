package kvevents

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-zeromq/zmq4"
	"github.com/prometheus/client_golang/prometheus/testutil"

	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
)

// seqTokens returns n tokens starting at from.
func seqTokens(from, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(from + i)
	}
	return out
}

// stored is a BlockStored of tokens in blocks of bs, with engine hashes base+1, base+2, ...
// and the given parent engine hash (0 = first block).
func stored(tokens []uint32, bs int, base, parent uint64, medium string) kvwire.Event {
	n := len(tokens) / bs
	hs := make([]uint64, n)
	for i := range hs {
		hs[i] = base + uint64(i) + 1
	}
	return kvwire.Event{Kind: kvwire.KindStored, Hashes: hs, Parent: parent, HasParent: parent != 0, Tokens: tokens[:n*bs], BlockSize: bs, Medium: medium}
}

// edited is ev after edit: a stored event with the fields a case adds (extra keys, LoRA,
// group).
func edited(ev kvwire.Event, edit func(*kvwire.Event)) kvwire.Event {
	edit(&ev)
	return ev
}

var (
	podA = SourceKey{Endpoint: "10.0.0.1:8000"}
	podB = SourceKey{Endpoint: "10.0.0.2:8000"}
)

func TestIndexLookup(t *testing.T) {
	prompt := seqTokens(1, 64) // 4 blocks of 16
	tests := []struct {
		name      string
		cfg       IndexConfig
		events    map[SourceKey][][]kvwire.Event // per source, batches in order
		salt      string
		model     string
		wantA     Match
		wantBlkB  int
		wantSkips map[string]float64
	}{
		{
			name:   "stored prefix matches, the other pod holds nothing",
			events: map[SourceKey][][]kvwire.Event{podA: {{stored(prompt[:48], 16, 100, 0, "GPU")}}},
			wantA:  Match{Blocks: 3, Weighted: 3, ByTier: map[string]int{"gpu": 3}},
		},
		{
			name: "a continuation store chains from its parent",
			events: map[SourceKey][][]kvwire.Event{podA: {
				{stored(prompt[:16], 16, 100, 0, "GPU")},
				{stored(prompt[16:64], 16, 200, 101, "GPU")},
			}},
			wantA: Match{Blocks: 4, Weighted: 4, ByTier: map[string]int{"gpu": 4}},
		},
		{
			name: "a removed middle block ends the prefix there",
			events: map[SourceKey][][]kvwire.Event{podA: {
				{stored(prompt, 16, 100, 0, "GPU")},
				{{Kind: kvwire.KindRemoved, Hashes: []uint64{102}, Medium: "GPU"}},
			}},
			wantA: Match{Blocks: 1, Weighted: 1, ByTier: map[string]int{"gpu": 1}},
		},
		{
			name:   "AllBlocksCleared forgets the pod",
			events: map[SourceKey][][]kvwire.Event{podA: {{stored(prompt, 16, 100, 0, "GPU")}, {{Kind: kvwire.KindCleared}}}},
			wantA:  Match{},
		},
		{
			name:      "unknown parent is skipped",
			events:    map[SourceKey][][]kvwire.Event{podA: {{stored(prompt[16:], 16, 200, 999, "GPU")}}},
			wantA:     Match{},
			wantSkips: map[string]float64{SkipUnknownParent: 1},
		},
		{
			name: "CPU tier weighs 0.8, a GPU copy of the same block weighs 1",
			cfg:  IndexConfig{TierWeights: map[string]float64{"gpu": 1, "cpu": 0.8}},
			events: map[SourceKey][][]kvwire.Event{podA: {
				{stored(prompt[:32], 16, 100, 0, "CPU")},
				{stored(prompt[:16], 16, 100, 0, "GPU")},
			}},
			wantA: Match{Blocks: 2, Weighted: 1.8, ByTier: map[string]int{"gpu": 1, "cpu": 1}},
		},
		{
			name: "removing the GPU copy keeps the CPU one",
			cfg:  IndexConfig{TierWeights: map[string]float64{"gpu": 1, "cpu": 0.5}},
			events: map[SourceKey][][]kvwire.Event{podA: {
				{stored(prompt[:16], 16, 100, 0, "CPU")},
				{stored(prompt[:16], 16, 100, 0, "GPU")},
				{{Kind: kvwire.KindRemoved, Hashes: []uint64{101}, Medium: "GPU"}},
			}},
			wantA: Match{Blocks: 1, Weighted: 0.5, ByTier: map[string]int{"cpu": 1}},
		},
		{
			name:   "engine blocks of 32 index as canonical blocks of 16",
			events: map[SourceKey][][]kvwire.Event{podA: {{stored(prompt, 32, 100, 0, "GPU")}}},
			wantA:  Match{Blocks: 4, Weighted: 4, ByTier: map[string]int{"gpu": 4}},
		},
		{
			name:      "an engine block size the canonical size does not divide is skipped",
			events:    map[SourceKey][][]kvwire.Event{podA: {{stored(prompt[:60], 12, 100, 0, "GPU")}}},
			wantA:     Match{},
			wantSkips: map[string]float64{SkipBlockSize: 1},
		},
		{
			name: "cache_salt in block 0's extra keys matches a salted request only",
			events: map[SourceKey][][]kvwire.Event{podA: {{edited(stored(prompt[:32], 16, 100, 0, "GPU"), func(e *kvwire.Event) {
				e.Extra = [][]string{{"s3cret"}, nil}
			})}}},
			salt:  "s3cret",
			wantA: Match{Blocks: 2, Weighted: 2, ByTier: map[string]int{"gpu": 2}},
		},
		{
			name: "a salted store does not match an unsalted request",
			events: map[SourceKey][][]kvwire.Event{podA: {{edited(stored(prompt[:32], 16, 100, 0, "GPU"), func(e *kvwire.Event) {
				e.Extra = [][]string{{"s3cret"}, nil}
			})}}},
			wantA: Match{},
		},
		{
			name: "LoRA blocks key in the adapter's namespace",
			events: map[SourceKey][][]kvwire.Event{podA: {{edited(stored(prompt[:32], 16, 100, 0, "GPU"), func(e *kvwire.Event) {
				e.LoraName = "adapter-1"
				e.Extra = [][]string{{"adapter-1"}, {"adapter-1"}}
			})}}},
			model: "adapter-1",
			wantA: Match{Blocks: 2, Weighted: 2, ByTier: map[string]int{"gpu": 2}},
		},
		{
			name: "hybrid model: a sliding-window group is not indexed",
			events: map[SourceKey][][]kvwire.Event{podA: {{edited(stored(prompt[:32], 16, 100, 0, "GPU"), func(e *kvwire.Event) {
				e.HasGroup, e.GroupIdx, e.SpecKind = true, 1, "sliding_window"
			})}}},
			wantA:     Match{},
			wantSkips: map[string]float64{SkipGroupKind: 1},
		},
		{
			name: "per-endpoint bound evicts the oldest blocks",
			cfg:  IndexConfig{MaxBlocksPerEndpoint: 2},
			events: map[SourceKey][][]kvwire.Event{
				podA: {{stored(prompt, 16, 100, 0, "GPU")}},
				podB: {{stored(prompt[:16], 16, 500, 0, "GPU")}},
			},
			wantA:    Match{}, // blocks 1 and 2 evicted: no leading block left
			wantBlkB: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.BlockSize = 16
			m := newMetrics()
			ix := NewIndex(cfg, m)
			for src, batches := range tc.events {
				for _, b := range batches {
					ix.Apply(src, b)
				}
			}
			keys := ix.Keyer().RequestKeys(nil, ix.Namespace(tc.model), prompt, tc.salt, 0)
			got := ix.Lookup(keys, []SourceKey{podA, podB, {Endpoint: "never-seen:1"}})
			if got[0].Blocks != tc.wantA.Blocks || got[0].Weighted != tc.wantA.Weighted || len(got[0].ByTier) != len(tc.wantA.ByTier) {
				t.Fatalf("pod A = %+v, want %+v", got[0], tc.wantA)
			}
			for k, v := range tc.wantA.ByTier {
				if got[0].ByTier[k] != v {
					t.Fatalf("pod A by tier = %v, want %v", got[0].ByTier, tc.wantA.ByTier)
				}
			}
			if got[1].Blocks != tc.wantBlkB {
				t.Fatalf("pod B = %+v, want %d blocks", got[1], tc.wantBlkB)
			}
			if got[2].Blocks != 0 {
				t.Fatalf("unknown pod matched %+v", got[2])
			}
			for reason, want := range tc.wantSkips {
				if v := testutil.ToFloat64(m.StoresSkipped.WithLabelValues(reason)); v != want {
					t.Errorf("skipped{%s} = %v, want %v", reason, v, want)
				}
			}
		})
	}
}

// A system prompt every pod holds must not hide what one pod holds past it: with holders
// bounded per key (llm-d's podCacheSize of 10), the 11th pod to store the shared prefix was
// never recorded for it, so its own conversation matched nothing at 64 pods.
func TestIndexSharedPrefixHeldByEveryPod(t *testing.T) {
	const pods = 64
	shared := seqTokens(1, 32) // two blocks every pod holds
	ix := NewIndex(IndexConfig{BlockSize: 16}, nil)
	cands := make([]SourceKey, pods)
	for i := range cands {
		cands[i] = SourceKey{Endpoint: fmt.Sprintf("10.0.1.%d:8000", i)}
		ix.Apply(cands[i], []kvwire.Event{stored(shared, 16, 100, 0, "GPU")})
	}
	// the last pod alone holds a conversation continuing the shared prefix
	session := append(append([]uint32{}, shared...), seqTokens(1000, 64)...)
	ix.Apply(cands[pods-1], []kvwire.Event{stored(session[32:], 16, 200, 102, "GPU")})

	keys := ix.Keyer().RequestKeys(nil, "", session, "", 0)
	got := ix.Lookup(keys, cands)
	for i, m := range got {
		want := 2
		if i == pods-1 {
			want = 6
		}
		if m.Blocks != want {
			t.Fatalf("pod %d matches %d blocks, want %d", i, m.Blocks, want)
		}
	}
	if _, k := ix.Size(); k != 6 {
		t.Fatalf("distinct keys %d, want 6", k)
	}
	for _, c := range cands[:pods-1] {
		ix.Forget(c)
	}
	if _, k := ix.Size(); k != 6 {
		t.Fatalf("after forgetting the other pods: %d keys, want the last pod's 6", k)
	}
}

func TestIndexBoundsHostileStream(t *testing.T) {
	ix := NewIndex(IndexConfig{BlockSize: 1, MaxKeys: 1000, MaxBlocksPerEndpoint: 500}, nil)
	for i := 0; i < 200; i++ {
		src := SourceKey{Endpoint: "10.0.0.1:8000", Rank: i % 3}
		ix.Apply(src, []kvwire.Event{stored(seqTokens(i*100, 100), 1, uint64(i)*1000, 0, "GPU")})
	}
	blocks, keys := ix.Size()
	if keys > 1000+100 || blocks > 3*500 {
		t.Fatalf("index grew past its bounds: %d blocks, %d keys", blocks, keys)
	}
	for _, s := range ix.Sources() {
		ix.Forget(s)
	}
	if b, k := ix.Size(); b != 0 || k != 0 {
		t.Fatalf("after forgetting every source: %d blocks, %d keys", b, k)
	}
}

// Clear empties a source that stays known (a restarted stream keeps publishing); Forget also
// drops the source (its endpoint left the pool).
func TestClearKeepsSourceForgetDropsIt(t *testing.T) {
	ix := NewIndex(IndexConfig{BlockSize: 1, MaxKeys: 1000, MaxBlocksPerEndpoint: 500}, nil)
	cleared, forgotten := SourceKey{Endpoint: "10.0.0.1:8000"}, SourceKey{Endpoint: "10.0.0.2:8000"}
	ix.Apply(cleared, []kvwire.Event{stored(seqTokens(0, 10), 1, 1000, 0, "GPU")})
	ix.Apply(forgotten, []kvwire.Event{stored(seqTokens(100, 10), 1, 2000, 0, "GPU")})
	ix.Clear(cleared)
	ix.Forget(forgotten)
	if b, k := ix.Size(); b != 0 || k != 0 || !slices.Equal(ix.Sources(), []SourceKey{cleared}) {
		t.Fatalf("%d blocks, %d keys, sources %v; want none held and only %v known", b, k, ix.Sources(), cleared)
	}
}

func TestDeliverSequenceRules(t *testing.T) {
	prompt := seqTokens(1, 32)
	tests := []struct {
		name       string
		seqs       []uint64
		wantBlocks int
		wantGaps   float64
		wantReason string
	}{
		{"in order", []uint64{0, 1}, 2, 0, ""},
		{"duplicate dropped", []uint64{0, 0}, 1, 0, ""},
		{"gap drops what was held", []uint64{0, 5}, 1, 1, ResyncGap},
		{"restart (sequence goes back) drops what was held", []uint64{7, 0}, 1, 0, ResyncReset},
		{"joining mid-stream is accepted", []uint64{41, 42}, 2, 0, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newMetrics()
			ix := NewIndex(IndexConfig{BlockSize: 16}, m)
			s := NewSubscribers(context.Background(), SubscriberConfig{}, ix, m, logr.Discard())
			// Two batches storing one block each; the second chains from the first when both apply.
			batches := []kvwire.Batch{
				{Events: []kvwire.Event{stored(prompt[:16], 16, 100, 0, "GPU")}},
				{Events: []kvwire.Event{stored(prompt[16:], 16, 200, 101, "GPU")}},
			}
			if tc.wantReason != "" {
				// After a resync the second batch's parent is gone: make it self-contained.
				batches[1] = kvwire.Batch{Events: []kvwire.Event{stored(prompt[16:], 16, 200, 0, "GPU")}}
			}
			for i, seq := range tc.seqs {
				s.Deliver(podA, seq, batches[i], nil)
			}
			if got := ix.Holds(podA); got != tc.wantBlocks {
				t.Fatalf("holds %d blocks, want %d", got, tc.wantBlocks)
			}
			if g := testutil.ToFloat64(m.Gaps); g != tc.wantGaps {
				t.Fatalf("gaps = %v, want %v", g, tc.wantGaps)
			}
			if tc.wantReason != "" && testutil.ToFloat64(m.Resyncs.WithLabelValues(tc.wantReason)) != 1 {
				t.Fatalf("resyncs{%s} not counted", tc.wantReason)
			}
		})
	}
}

// A real zmq4 PUB publishing vLLM-framed messages to a dialled SUB: blocks arrive in the
// index; when the publisher goes away its blocks are dropped.
func TestSubscriberOverZeroMQ(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pub := zmq4.NewPub(ctx)
	if err := pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	addr := pub.Addr().String()
	host, port := splitHostPort(t, addr)
	m := newMetrics()
	ix := NewIndex(IndexConfig{BlockSize: 16}, m)
	subs := NewSubscribers(ctx, SubscriberConfig{TopicFilter: "kv@", SocketPort: port, ReconnectDelay: 100 * time.Millisecond}, ix, m, logr.Discard())
	src := SourceKey{Endpoint: host + ":8000"}
	subs.Ensure(src.Endpoint, host, 0)

	prompt := seqTokens(1, 32)
	payload, err := kvwire.EncodeBatch(kvwire.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: []kvwire.Event{stored(prompt, 16, 100, 0, "GPU")}}, kvwire.FormatMap)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for seq := uint64(0); ix.Holds(src) < 2; seq++ {
		if time.Now().After(deadline) {
			t.Fatal("no blocks arrived over ZeroMQ")
		}
		var b [8]byte
		putBE(b[:], seq)
		// Publishing repeatedly rides out ZeroMQ's slow-joiner window; repeats are duplicates
		// only when the sequence number repeats, so each is a fresh one.
		if err := pub.Send(zmq4.NewMsgFrom([]byte("kv@"+src.Endpoint+"@m"), b[:], payload)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := testutil.ToFloat64(m.Messages.WithLabelValues(ResultApplied)); got < 1 {
		t.Fatalf("applied messages = %v", got)
	}
	_ = pub.Close()
	for ix.Holds(src) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("blocks of a departed publisher were kept")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func splitHostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return host, port
}

func putBE(b []byte, v uint64) { binary.BigEndian.PutUint64(b, v) }

// TestIndexLookupMatchesEachSourcesBlocks replays random stores, tier updates, removals and
// clears over many sources sharing prefixes, and checks every lookup against a walk of each
// source's own blocks: the sorted holder lists and the merged walk must find exactly what each
// source holds, for any set of candidates, in any order, duplicates included.
func TestIndexLookupMatchesEachSourcesBlocks(t *testing.T) {
	const bs, nSrc = 4, 24
	rng := rand.New(rand.NewPCG(7, 11))
	ix := NewIndex(IndexConfig{BlockSize: bs, TierWeights: map[string]float64{"gpu": 1, "cpu": 0.5}}, nil)
	srcs := make([]SourceKey, nSrc)
	for i := range srcs {
		srcs[i] = SourceKey{Endpoint: fmt.Sprintf("10.0.2.%d:8000", i)}
	}
	// prompts share a common head and branch: token values from a small alphabet per block
	prompt := func() []uint32 {
		n := 1 + rng.IntN(8)
		out := make([]uint32, 0, n*bs)
		for b := 0; b < n; b++ {
			v := uint32(rng.IntN(3))
			if b == 0 {
				v = 0
			}
			for j := 0; j < bs; j++ {
				out = append(out, v*100+uint32(b))
			}
		}
		return out
	}
	type record struct{ hashes []uint64 }
	history := make([][]record, nSrc)
	for step := 0; step < 3000; step++ {
		i := rng.IntN(nSrc)
		switch r := rng.IntN(20); {
		case r < 12: // a whole prompt stored from its root
			// an engine hashes a block from its parent's hash and its tokens, so the same prefix
			// stored again (or in another tier) is the same blocks
			p := prompt()
			ev := kvwire.Event{Kind: kvwire.KindStored, Tokens: p, BlockSize: bs, Medium: []string{"GPU", "CPU"}[rng.IntN(2)]}
			var h uint64
			for b := 0; b < len(p)/bs; b++ {
				h = h*1_000_003 + uint64(p[b*bs]) + 1
				ev.Hashes = append(ev.Hashes, h)
			}
			ix.Apply(srcs[i], []kvwire.Event{ev})
			history[i] = append(history[i], record{ev.Hashes})
		case r < 18 && len(history[i]) > 0: // a block removed in one tier
			h := history[i][rng.IntN(len(history[i]))]
			ix.Apply(srcs[i], []kvwire.Event{{Kind: kvwire.KindRemoved, Hashes: []uint64{h.hashes[rng.IntN(len(h.hashes))]},
				Medium: []string{"GPU", "CPU"}[rng.IntN(2)]}})
		case r == 19:
			ix.Apply(srcs[i], []kvwire.Event{{Kind: kvwire.KindCleared}})
			history[i] = nil
		}
		if step%50 != 0 {
			continue
		}
		keys := ix.Keyer().RequestKeys(nil, "", prompt(), "", 0)
		cands := make([]SourceKey, 1+rng.IntN(2*nSrc))
		for c := range cands {
			cands[c] = srcs[rng.IntN(nSrc)]
		}
		got := ix.Lookup(keys, cands)
		for c, src := range cands {
			want := walkSource(ix, src, keys)
			if got[c].Blocks != want {
				t.Fatalf("step %d: %s matches %d blocks, its own blocks hold %d", step, src.Endpoint, got[c].Blocks, want)
			}
			n := 0
			for _, v := range got[c].ByTier {
				n += v
			}
			if n != got[c].Blocks {
				t.Fatalf("step %d: %s ByTier %v does not add up to %d blocks", step, src.Endpoint, got[c].ByTier, got[c].Blocks)
			}
		}
	}
}

// walkSource is the longest run of leading keys among the request keys of src's own blocks
// still held in some tier.
func walkSource(ix *Index, src SourceKey, keys []uint64) int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	s := ix.srcs[src]
	if s == nil {
		return 0
	}
	held := map[uint64]bool{}
	for _, b := range s.blocks {
		if b.tiers != 0 {
			for _, k := range b.keys {
				held[k] = true
			}
		}
	}
	n := 0
	for _, k := range keys {
		if !held[k] {
			break
		}
		n++
	}
	return n
}
