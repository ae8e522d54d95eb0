// Package burstprefix is llm-d's burst-prefix-cache-producer: it co-locates bursts of
// prompt-sharing requests (RL rollout groups, fan-out agents) that arrive within a short window,
// so a shared prefix is prefilled once on one replica instead of cold on many. Requests wait
// up to windowDurationMs; at the end of the window the batch is grouped by identical block-hash
// sequence, each group is placed on one replica (preferring one that already holds the prefix,
// under a fair share of the batch), and the producer writes PrefixCacheMatchInfo = full match on
// the assigned replica and 0 elsewhere, which prefix-cache-scorer turns into the placement.
package burstprefix

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Type is the plugin type name.
const Type = "burst-prefix-cache-producer"

// maxBlocks caps the blocks hashed per prompt when maxPrefixTokensToMatch is 0 (llm-d's cap).
const maxBlocks = 2048

// Parameters are llm-d's parameters.
type Parameters struct {
	WindowDurationMs       int    `json:"windowDurationMs"`
	MaxPerReplica          int    `json:"maxPerReplica"`
	BlockSizeTokens        int    `json:"blockSizeTokens"`
	MaxPrefixTokensToMatch int    `json:"maxPrefixTokensToMatch"`
	MinColocateBlocks      int    `json:"minColocateBlocks"`
	MaxBatchSize           int    `json:"maxBatchSize"`
	BalanceBy              string `json:"balanceBy"`
}

// DefaultParameters are llm-d's defaults.
func DefaultParameters() Parameters {
	return Parameters{WindowDurationMs: 100, MaxPerReplica: -1, BlockSizeTokens: 64, MaxBatchSize: 1000, BalanceBy: "requests"}
}

// ParseParameters decodes strictly, defaults and validates.
func ParseParameters(name string, raw json.RawMessage) (Parameters, error) {
	p := DefaultParameters()
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return Parameters{}, err
	}
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%s %q: parameter %s=%v: %s", Type, name, field, v, why)
	}
	switch {
	case p.WindowDurationMs < 1 || p.WindowDurationMs > 10000:
		return Parameters{}, bad("windowDurationMs", p.WindowDurationMs, "must be in 1..10000")
	case p.MaxPerReplica != -1 && p.MaxPerReplica < 1:
		return Parameters{}, bad("maxPerReplica", p.MaxPerReplica, "must be -1 (unlimited) or >= 1")
	case p.BlockSizeTokens <= 0:
		return Parameters{}, bad("blockSizeTokens", p.BlockSizeTokens, "must be > 0")
	case p.MaxPrefixTokensToMatch < 0 || (p.MaxPrefixTokensToMatch > 0 && p.MaxPrefixTokensToMatch < p.BlockSizeTokens):
		return Parameters{}, bad("maxPrefixTokensToMatch", p.MaxPrefixTokensToMatch, "must be 0 or >= blockSizeTokens")
	case p.MinColocateBlocks < 0:
		return Parameters{}, bad("minColocateBlocks", p.MinColocateBlocks, "must be >= 0")
	case p.MaxBatchSize != -1 && p.MaxBatchSize < 1:
		return Parameters{}, bad("maxBatchSize", p.MaxBatchSize, "must be -1 (unlimited) or >= 1")
	case p.BalanceBy != "requests" && p.BalanceBy != "tokens":
		return Parameters{}, bad("balanceBy", p.BalanceBy, "must be requests or tokens")
	}
	return p, nil
}

// member is one request waiting in a batch.
type member struct {
	hashes []uint64
	eps    []fwksched.Endpoint
	// assigned is the endpoint name the request was placed on ("" = no unit).
	assigned string
}

type batch struct {
	members []*member
	sealed  chan struct{}
}

// Producer is burst-prefix-cache-producer.
type Producer struct {
	tn fwkplugin.TypedName
	p  Parameters

	mu   sync.Mutex
	cur  *batch
	held map[string]map[uint64]struct{} // replica → block hashes placed there (bounded)
}

var _ fwkrc.PrepareDataPlugin = (*Producer)(nil)

// Factory builds the producer.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return pluginkit.Build(name, raw, ParseParameters, New)
}

// New builds the producer.
func New(name string, p Parameters) *Producer {
	return &Producer{tn: pluginkit.TypedName(Type, name), p: p, held: map[string]map[uint64]struct{}{}}
}

// TypedName implements fwkplugin.Plugin.
func (b *Producer) TypedName() fwkplugin.TypedName { return b.tn }

// Produces declares PrefixCacheMatchInfo.
func (b *Producer) Produces() map[string]any {
	return map[string]any{attrprefix.PrefixCacheMatchInfoKey: attrprefix.PrefixCacheMatchInfo{}}
}

// Consumes declares the tokenized prompt (token-producer; the estimate backend is added when
// none is configured).
func (b *Producer) Consumes() map[string]any {
	return map[string]any{contract.TokenizedPromptKey: contract.TokenizedPromptData{}}
}

// Hashes chains xxhash over blockSizeTokens chunks of the token IDs, seeded with the model.
func (b *Producer) Hashes(model string, tokens []uint32) []uint64 {
	n := len(tokens) / b.p.BlockSizeTokens
	limit := maxBlocks
	if b.p.MaxPrefixTokensToMatch > 0 {
		limit = b.p.MaxPrefixTokensToMatch / b.p.BlockSizeTokens
	}
	n = min(n, limit)
	out := make([]uint64, n)
	prev := xxhash.Sum64String(model)
	buf := make([]byte, 8+4*b.p.BlockSizeTokens)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint64(buf, prev)
		for j, t := range tokens[i*b.p.BlockSizeTokens : (i+1)*b.p.BlockSizeTokens] {
			binary.LittleEndian.PutUint32(buf[8+4*j:], t)
		}
		prev = xxhash.Sum64(buf)
		out[i] = prev
	}
	return out
}

// PrepareRequestData joins the current window's batch, waits for it to seal (or ctx to end)
// and writes each candidate's match info.
func (b *Producer) PrepareRequestData(ctx context.Context, req *fwksched.LLMRequest, eps []fwksched.Endpoint) error {
	if req == nil || req.TokenizedPrompt == nil || len(eps) == 0 {
		return nil
	}
	m := &member{hashes: b.Hashes(req.TargetModel, req.TokenizedPrompt.TokenIDs), eps: eps}
	if len(m.hashes) == 0 {
		return nil
	}
	b.mu.Lock()
	if b.cur == nil {
		bt := &batch{sealed: make(chan struct{})}
		b.cur = bt
		time.AfterFunc(time.Duration(b.p.WindowDurationMs)*time.Millisecond, func() { b.seal(bt) })
	}
	bt := b.cur
	if b.p.MaxBatchSize > 0 && len(bt.members) >= b.p.MaxBatchSize {
		b.mu.Unlock()
		return fmt.Errorf("%s: batch full (%d requests)", Type, b.p.MaxBatchSize)
	}
	bt.members = append(bt.members, m)
	b.mu.Unlock()
	select {
	case <-bt.sealed:
	case <-ctx.Done():
		return ctx.Err()
	}
	total := len(m.hashes)
	for _, ep := range eps {
		match := 0
		if m.assigned != "" && ep.GetMetadata().NamespacedName.String() == m.assigned {
			match = total
		}
		ep.Put(attrprefix.PrefixCacheMatchInfoKey, attrprefix.NewPrefixCacheMatchInfo(match, total, b.p.BlockSizeTokens))
	}
	return nil
}

// seal closes the batch and places its units.
func (b *Producer) seal(bt *batch) {
	b.mu.Lock()
	if b.cur == bt {
		b.cur = nil
	}
	b.place(bt.members)
	b.mu.Unlock()
	close(bt.sealed)
}

type unit struct {
	members []*member
	group   bool
}

func seqKey(h []uint64) [2]uint64 { return [2]uint64{h[len(h)-1], uint64(len(h))} }

// place groups members into units and assigns them (b.mu held).
func (b *Producer) place(members []*member) {
	groups := map[[2]uint64][]*member{}
	var keys [][2]uint64
	for _, m := range members {
		k := seqKey(m.hashes)
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], m)
	}
	var units []unit
	for _, k := range keys {
		g := groups[k]
		if len(g) >= 2 {
			units = append(units, unit{members: g, group: true})
			continue
		}
		if b.p.MinColocateBlocks > 0 && sharesLead(g[0], members, b.p.MinColocateBlocks) {
			units = append(units, unit{members: g})
		}
	}
	sort.SliceStable(units, func(i, j int) bool {
		li, lj := len(units[i].members[0].hashes), len(units[j].members[0].hashes)
		if li != lj {
			return li > lj
		}
		return units[i].group && !units[j].group
	})
	load := map[string]int{}
	totalLoad := 0
	for _, u := range units {
		totalLoad += b.cost(u.members[0], "") * len(u.members)
	}
	for _, u := range units {
		eps := u.members[0].eps
		share := (totalLoad + len(eps) - 1) / len(eps)
		left := u.members
		for len(left) > 0 {
			target := b.pick(u.members[0], eps, load, share)
			n := len(left)
			if b.p.MaxPerReplica > 0 {
				n = min(n, b.p.MaxPerReplica)
			}
			for _, m := range left[:n] {
				m.assigned = target
				load[target] += b.cost(m, target)
			}
			b.remember(target, u.members[0].hashes)
			left = left[n:]
			if len(left) > 0 {
				load[target] = max(load[target], share) // spill: the next members go elsewhere
			}
		}
	}
}

// cost is a member's load on replica: one request, or (balanceBy tokens) its blocks the
// replica does not hold.
func (b *Producer) cost(m *member, replica string) int {
	if b.p.BalanceBy != "tokens" {
		return 1
	}
	held := b.held[replica]
	n := 0
	for _, h := range m.hashes {
		if _, ok := held[h]; !ok {
			n++
		}
	}
	return n
}

// pick prefers the replica holding the longest leading match (>= minColocateBlocks, at least
// one block) under the fair share, else the least loaded (ties: fewer running requests, name).
func (b *Producer) pick(m *member, eps []fwksched.Endpoint, load map[string]int, share int) string {
	best, bestMatch := "", 0
	need := max(1, b.p.MinColocateBlocks)
	for _, ep := range eps {
		name := ep.GetMetadata().NamespacedName.String()
		if load[name] >= share {
			continue
		}
		n := leading(b.held[name], m.hashes)
		if n >= need && (n > bestMatch || (n == bestMatch && name < best)) {
			best, bestMatch = name, n
		}
	}
	if best != "" {
		return best
	}
	sorted := append([]fwksched.Endpoint(nil), eps...)
	sort.SliceStable(sorted, func(i, j int) bool {
		ni, nj := sorted[i].GetMetadata().NamespacedName.String(), sorted[j].GetMetadata().NamespacedName.String()
		if load[ni] != load[nj] {
			return load[ni] < load[nj]
		}
		ri, rj := running(sorted[i]), running(sorted[j])
		if ri != rj {
			return ri < rj
		}
		return ni < nj
	})
	return sorted[0].GetMetadata().NamespacedName.String()
}

func running(ep fwksched.Endpoint) int {
	if m := ep.GetMetrics(); m != nil {
		return m.RunningRequestsSize
	}
	return 0
}

func leading(held map[uint64]struct{}, hashes []uint64) int {
	n := 0
	for _, h := range hashes {
		if _, ok := held[h]; !ok {
			break
		}
		n++
	}
	return n
}

func sharesLead(m *member, all []*member, k int) bool {
	if len(m.hashes) < k {
		return false
	}
	for _, o := range all {
		if o != m && len(o.hashes) >= k && o.hashes[k-1] == m.hashes[k-1] {
			return true
		}
	}
	return false
}

// maxHeldPerReplica bounds the per-replica memory of placed blocks.
const maxHeldPerReplica = 1 << 16

func (b *Producer) remember(replica string, hashes []uint64) {
	h := b.held[replica]
	if h == nil || len(h)+len(hashes) > maxHeldPerReplica {
		h = make(map[uint64]struct{}, len(hashes))
		b.held[replica] = h
	}
	for _, x := range hashes {
		h[x] = struct{}{}
	}
}

// approximateProducers are the types that also write PrefixCacheMatchInfo: GIE's loader (and
// pdgate, for prefix-cache-scorer) creates one for every prefix-cache-scorer, whose
// prefixMatchInfoProducerName GIE ignores.
var approximateProducers = map[string]bool{"approx-prefix-cache-producer": true, "pdgate-prefix-cache-producer": true}

// ResolveReferences runs once every plugin exists: the approximate producers are removed, so
// the burst placement is what prefix-cache-scorer reads (two producers of one attribute would
// overwrite each other in no defined order).
func (b *Producer) ResolveReferences(handle fwkplugin.Handle) error {
	if handle == nil {
		return nil
	}
	all := handle.GetAllPluginsWithNames()
	for name, p := range all {
		if p != nil && approximateProducers[p.TypedName().Type] {
			delete(all, name)
			log.FromContext(pluginkit.Context(handle)).Info("burst-prefix-cache-producer is configured: the approximate prefix producer is not used", "dropped", name, "producer", b.tn.String())
		}
	}
	return nil
}
