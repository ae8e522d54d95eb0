// Package precisecache is what precise-prefix-cache-producer and precise-prefix-cache-scorer
// share: the KV-event index and subscribers of one plugin instance (plugins/precise/kvevents), wired
// to GIE's endpoints, requests and attributes.
package precisecache

import (
	"context"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/tokenestimate"
	"github.com/pdgate/pdgate/plugins/precise/kvevents"
	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
)

// MatchInfoKey is the endpoint attribute carrying the precise match (tier-weighted and per
// tier), next to GIE's PrefixCacheMatchInfo (unweighted), which the deciders and the 412 gate
// read.
const MatchInfoKey = "PrecisePrefixCacheMatchInfo"

// MatchInfoType is what the precise plugins declare in Produces and Consumes for MatchInfoKey.
// GIE's dependency check compares the declared values with ==, so the declaration must be
// comparable: a typed nil pointer (the attribute is stored as *MatchInfo), never a MatchInfo
// value, whose map would make the comparison panic.
var MatchInfoType = (*MatchInfo)(nil)

// Produces is what a plugin running a Core declares it produces: the match Produce puts on
// every endpoint, as GIE's PrefixCacheMatchInfo and as MatchInfo.
func Produces() map[string]any {
	return map[string]any{
		attrprefix.PrefixCacheMatchInfoKey: attrprefix.PrefixCacheMatchInfo{},
		MatchInfoKey:                       MatchInfoType,
	}
}

// Consumes is what a plugin running a Core declares it consumes: the tokenized prompt (llm-d
// requires it; the EPP adds token-producer when nothing produces it).
func Consumes() map[string]any {
	return map[string]any{contract.TokenizedPromptKey: contract.TokenizedPromptData{}}
}

// MatchInfo is one endpoint's precise prefix match for one request.
type MatchInfo struct {
	// Blocks is the unweighted count of leading blocks held (llm-d's cachedBlockCount).
	Blocks int
	// Weighted is the tier-weighted count (llm-d's matchBlocks before truncation).
	Weighted float64
	// Total is the request's block count.
	Total int
	// BlockSizeTokens is the canonical block size.
	BlockSizeTokens int
	// ByTier counts the held blocks by their best tier.
	ByTier map[string]int
}

// Clone implements fwkdl.Cloneable.
func (m *MatchInfo) Clone() fwkdl.Cloneable {
	c := *m
	if m.ByTier != nil {
		c.ByTier = make(map[string]int, len(m.ByTier))
		for k, v := range m.ByTier {
			c.ByTier[k] = v
		}
	}
	return &c
}

// Score is llm-d's prefix-cache-scorer default: weighted matched blocks / total blocks.
func (m *MatchInfo) Score() float64 {
	if m == nil || m.Total <= 0 {
		return 0
	}
	s := m.Weighted / float64(m.Total)
	if s > 1 {
		s = 1
	}
	return s
}

// Owner is implemented by the plugins that own a Core (precise-prefix-cache-producer), so a
// precise-prefix-cache-scorer declared with one binds to it instead of subscribing again.
type Owner interface {
	fwkplugin.Plugin
	PreciseCore() *Core
}

// Core is one instance's index, subscribers and request matching.
type Core struct {
	name      string
	cfg       kvevents.Resolved
	ix        *kvevents.Index
	subs      *kvevents.Subscribers
	m         *kvevents.Metrics
	log       logr.Logger
	mu        sync.Mutex
	known     map[string]endpointRef // endpoint name → subscribed endpoint
	startOnce sync.Once
	running   atomic.Bool // subscribers may be started (a plugin built without a handle never dials)
	podNames  func() []types.NamespacedName
	pool      *poolView
	// watchInterval and unreachableAfter tune the pool watch (pool.go).
	watchInterval    time.Duration
	unreachableAfter time.Duration
}

type endpointRef struct {
	key  string
	rank int
}

// New builds a core for the plugin named name. Its goroutines live as long as ctx; without a
// context (nil handle) nothing is started.
func New(ctx context.Context, name string, cfg kvevents.Resolved, started bool) *Core {
	m, err := kvevents.NewMetrics(pluginkit.RegistererOf(ctx))
	if err != nil {
		// Only a foreign collector under one of our names conflicts; keep indexing, unexported.
		log.FromContext(ctx).Error(err, "KV-event metrics not registered", "plugin", name)
	}
	c := &Core{name: name, cfg: cfg, m: m, known: map[string]endpointRef{}, pool: newPoolView(ctx),
		watchInterval: DefaultWatchInterval, unreachableAfter: DefaultUnreachableAfter,
		ix: kvevents.NewIndex(kvevents.IndexConfig{BlockSize: cfg.BlockSize, HashSeed: cfg.HashSeed, MaxKeys: cfg.Size,
			MaxBlocksPerEndpoint: cfg.MaxBlocksPerEndpoint, TierWeights: cfg.TierWeights}, m)}
	c.log = log.FromContext(ctx).WithValues("plugin", name)
	c.subs = kvevents.NewSubscribers(ctx, kvevents.SubscriberConfig{TopicFilter: cfg.TopicFilter, ZMQEndpoint: cfg.Central,
		SocketPort: cfg.SocketPort, Resolve: c.pool.resolve}, c.ix, m, c.log)
	if started {
		c.Start(ctx)
	}
	return c
}

// SetPool gives the core the pool's endpoint list (the EPP handle's PodList): the central
// socket is bound only once the pool has an endpoint.
func (c *Core) SetPool(pool func() []types.NamespacedName) { c.podNames = pool }

// Start runs what New did not start (the central socket, the size log); once.
func (c *Core) Start(ctx context.Context) {
	c.startOnce.Do(func() { c.start(ctx) })
}

func (c *Core) start(ctx context.Context) {
	c.running.Store(true)
	cfg := c.cfg
	if cfg.Central != "" {
		go c.bindCentral(ctx)
	}
	if cfg.MetricsLoggingInterval > 0 {
		go c.housekeeping(ctx)
	}
	if c.pool.list != nil {
		go c.watchPool(ctx)
	}
	if cfg.Speculative {
		c.log.Info("speculativeIndexing is accepted but not implemented: the index holds only what engines reported")
	}
}

// bindCentral binds the central socket, retrying while the address is taken (another EPP on
// the host, or `pdgate validate` next to a running one), logging each failure.
func (c *Core) bindCentral(ctx context.Context) {
	// Bind once the pool has an endpoint: an EPP that serves has one within its first
	// endpoint sync, while `pdgate validate` (and any assembly that never serves) has none and
	// so never takes the port a running EPP on the same host holds.
	for c.podNames != nil && len(c.podNames()) == 0 {
		select {
		case <-ctx.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
	for {
		err := c.subs.StartCentral()
		if err == nil {
			c.log.Info("KV-event subscriber bound; engines publish to it", "zmqEndpoint", c.cfg.Central)
			return
		}
		c.log.Error(err, "cannot bind the KV-event socket; retrying")
		select {
		case <-ctx.Done():
			return
		case <-time.After(5 * time.Second):
		}
	}
}

// housekeeping logs the index size when metricsLoggingInterval asks for it.
func (c *Core) housekeeping(ctx context.Context) {
	lastLog := time.Now()
	pluginkit.Every(ctx, time.Second, func() {
		if iv := c.cfg.MetricsLoggingInterval; iv > 0 && time.Since(lastLog) >= iv {
			lastLog = time.Now()
			blocks, keys := c.ix.Size()
			c.log.Info("KV-event index", "blocks", blocks, "keys", keys, "sources", len(c.ix.Sources()))
		}
	})
}

// Index returns the core's index.
func (c *Core) Index() *kvevents.Index { return c.ix }

// Subscribers returns the core's subscribers.
func (c *Core) Subscribers() *kvevents.Subscribers { return c.subs }

// Resolved returns the effective configuration.
func (c *Core) Resolved() kvevents.Resolved { return c.cfg }

// sourceOf is an endpoint's event source: "address:port" and its DP rank (the "-rank-N"
// suffix GIE gives the endpoints of a pool with several target ports, else 0).
func sourceOf(meta *fwkdl.EndpointMetadata) (kvevents.SourceKey, string) {
	if meta == nil {
		return kvevents.SourceKey{}, ""
	}
	rank := 0
	name := meta.NamespacedName.Name
	if i := strings.LastIndex(name, "-rank-"); i >= 0 {
		if r, err := strconv.Atoi(name[i+len("-rank-"):]); err == nil && r >= 0 {
			rank = r
		}
	}
	host := meta.Address
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]"
	}
	return kvevents.SourceKey{Endpoint: host + ":" + meta.Port, Rank: rank}, name
}

// Deliver applies a batch of an endpoint's KV events in process, as its subscriber would after
// decoding them: the source of events that need no socket (pdgate bench sim's simulated
// fleet feeds its engines' prefix-cache changes here). Events of one endpoint must be
// delivered in order.
func (c *Core) Deliver(meta *fwkdl.EndpointMetadata, events []kvwire.Event) {
	if meta == nil || len(events) == 0 {
		return
	}
	src, _ := sourceOf(meta)
	c.ix.Apply(src, events)
}

// Track starts following an endpoint's events (discovery mode), idempotently.
func (c *Core) Track(meta *fwkdl.EndpointMetadata) {
	if !c.running.Load() || c.cfg.Central != "" || !c.cfg.DiscoverPods || meta == nil || meta.Address == "" {
		return
	}
	src, name := sourceOf(meta)
	if c.subs.Has(src.Endpoint) {
		return
	}
	c.mu.Lock()
	c.known[meta.NamespacedName.String()] = endpointRef{key: src.Endpoint, rank: src.Rank}
	c.mu.Unlock()
	c.log.V(1).Info("following the endpoint's KV events", "endpoint", name, "source", src.Endpoint, "rank", src.Rank,
		"publisher", fmt.Sprintf("%s:%d", meta.Address, c.cfg.SocketPort+src.Rank))
	c.subs.Ensure(src.Endpoint, meta.Address, src.Rank)
}

// Untrack stops following an endpoint and forgets its blocks.
func (c *Core) Untrack(meta *fwkdl.EndpointMetadata) {
	if meta == nil {
		return
	}
	src, _ := sourceOf(meta)
	c.mu.Lock()
	delete(c.known, meta.NamespacedName.String())
	c.mu.Unlock()
	c.subs.Remove(src.Endpoint, src.Rank)
}

// ExpectedInputType is the endpoint-notification-source output (fwkdl.Extractor).
func (c *Core) ExpectedInputType() reflect.Type { return fwkdl.EndpointEventReflectType }

// Extract implements fwkdl.Extractor (endpoint events come through ExtractEndpoint).
func (c *Core) Extract(context.Context, any, fwkdl.Endpoint) error { return nil }

// ExtractEndpoint follows endpoints added to the pool and forgets removed ones, when the
// plugin is an extractor of endpoint-notification-source (llm-d's wiring).
func (c *Core) ExtractEndpoint(_ context.Context, ev fwkdl.EndpointEvent) error {
	if ev.Endpoint == nil {
		return nil
	}
	if ev.Type == fwkdl.EventDelete {
		c.Untrack(ev.Endpoint.GetMetadata())
		return nil
	}
	c.Track(ev.Endpoint.GetMetadata())
	return nil
}

// RequestKeys computes a request's keys from its tokenized prompt (the estimate when no
// token producer filled it), its model's namespace and its cache_salt.
func (c *Core) RequestKeys(request *fwksched.LLMRequest) []uint64 {
	if request == nil {
		return nil
	}
	tp := request.TokenizedPrompt
	if tp == nil {
		tp = tokenestimate.Estimate(request, tokenestimate.EstimateParams{})
	}
	if tp == nil {
		return nil
	}
	salt := ""
	if request.Body != nil {
		salt = request.Body.CacheSalt()
	}
	return c.ix.Keyer().RequestKeys(make([]uint64, 0, len(tp.TokenIDs)/c.cfg.BlockSize), c.ix.Namespace(request.TargetModel), tp.TokenIDs, salt, 0)
}

// Produce puts each endpoint's match on it: GIE's PrefixCacheMatchInfo with the unweighted
// count (what the deciders and the 412 gate read) and MatchInfo (weighted, per tier). It also
// follows every endpoint it sees (discovery without the data-layer wiring).
func (c *Core) Produce(ctx context.Context, request *fwksched.LLMRequest, endpoints []fwksched.Endpoint) {
	keys := c.RequestKeys(request)
	cands := make([]kvevents.SourceKey, len(endpoints))
	for i, ep := range endpoints {
		meta := ep.GetMetadata()
		cands[i], _ = sourceOf(meta)
		c.Track(meta)
	}
	matches := c.ix.Lookup(keys, cands)
	c.m.Lookups.Inc()
	dbg := log.FromContext(ctx).V(logutil.TRACE)
	for i, ep := range endpoints {
		mi := &MatchInfo{Blocks: matches[i].Blocks, Weighted: matches[i].Weighted, Total: len(keys),
			BlockSizeTokens: c.cfg.BlockSize, ByTier: matches[i].ByTier}
		ep.Put(attrprefix.PrefixCacheMatchInfoKey, attrprefix.NewPrefixCacheMatchInfo(mi.Blocks, mi.Total, mi.BlockSizeTokens))
		ep.Put(MatchInfoKey, mi)
		if dbg.Enabled() {
			dbg.Info("precise prefix match", "plugin", c.name, "endpoint", cands[i].Endpoint, "blocks", mi.Blocks,
				"weighted", mi.Weighted, "total", mi.Total)
		}
	}
}

// Score returns an endpoint's score from the attributes Produce put.
func Score(ep fwksched.Endpoint) float64 {
	if v, ok := ep.Get(MatchInfoKey); ok {
		if mi, ok := v.(*MatchInfo); ok {
			return mi.Score()
		}
	}
	if v, ok := ep.Get(attrprefix.PrefixCacheMatchInfoKey); ok {
		if pi, ok := v.(*attrprefix.PrefixCacheMatchInfo); ok && pi.TotalBlocks() > 0 {
			return float64(pi.MatchBlocks()) / float64(pi.TotalBlocks())
		}
	}
	return 0
}

// DropApproximateProducers removes the approximate producers of PrefixCacheMatchInfo from the
// handle: GIE's loader creates approx-prefix-cache-producer for every prefix-cache-scorer
// (llm-d's configs name the precise producer in prefixMatchInfoProducerName, which GIE
// ignores), and two producers of one attribute would overwrite each other in an undefined
// order. With a precise producer configured, the precise data is what every reader gets.
func DropApproximateProducers(handle fwkplugin.Handle, owner string, logger logr.Logger) error {
	if handle == nil {
		return nil
	}
	approx := map[string]bool{"approx-prefix-cache-producer": true, "pdgate-prefix-cache-producer": true}
	all := handle.GetAllPluginsWithNames()
	for name, p := range all {
		if p != nil && approx[p.TypedName().Type] {
			delete(all, name)
			logger.Info("a precise prefix-cache producer is configured: the approximate producer is not used", "dropped", name, "precise", owner)
		}
	}
	for _, p := range handle.GetAllPlugins() {
		if p != nil && approx[p.TypedName().Type] {
			return fmt.Errorf("%s and %s both produce %s; configure one of them", owner, p.TypedName().String(), attrprefix.PrefixCacheMatchInfoKey)
		}
	}
	return nil
}
