package precisecache

import (
	"context"
	"net"
	"strings"
	"sync"
	"time"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/precise/kvevents"
)

// Defaults of the pool watch.
const (
	// DefaultWatchInterval is how often the pool is compared with what the index holds.
	DefaultWatchInterval = 250 * time.Millisecond
	// DefaultUnreachableAfter is how long an engine's metrics may go unscraped before its
	// blocks are dropped: GIE scrapes every 50 ms, so 2 s is forty missed scrapes, while an
	// engine restart (weights loaded again) takes far longer.
	DefaultUnreachableAfter = 2 * time.Second
	// directoryMaxAge bounds how stale the address directory may be when a topic is resolved;
	// a miss refreshes it sooner (directoryMissRefresh), so a new pod is found within one
	// message.
	directoryMaxAge      = time.Second
	directoryMissRefresh = 100 * time.Millisecond
)

// poolView is what the core knows of the pool: the endpoints by address (to resolve the
// address a central-mode topic names) and, per endpoint, the engine signals that show a
// restart before the restarted engine publishes anything.
type poolView struct {
	list pluginkit.EndpointLister // nil: no pool known (topics are taken as given)

	mu      sync.Mutex
	byAddr  map[string][]kvevents.SourceKey
	builtAt time.Time
	engines map[string]*engineSeen // source endpoint "address:port" → its signals
}

type engineSeen struct {
	processStart float64
	down         bool
}

func newPoolView(ctx context.Context) *poolView {
	return &poolView{list: pluginkit.EndpointsOf(ctx), engines: map[string]*engineSeen{}}
}

// resolve maps the endpoint a topic names ("address:port", "address", "[v6]:port") to the
// source of the one pool endpoint it can mean, for the batch's data-parallel rank.
func (p *poolView) resolve(topicEndpoint string, rank int) (kvevents.SourceKey, kvevents.Resolution) {
	if p.list == nil {
		return kvevents.SourceKey{Endpoint: topicEndpoint, Rank: rank}, kvevents.ResolvedUnchecked
	}
	host, port := splitTopicEndpoint(topicEndpoint)
	key, how := p.lookup(host, port, rank, time.Now(), directoryMaxAge)
	if how == kvevents.Unmatched {
		// A pod that joined since the last build: look again, at most every 100 ms, so a
		// flood of unknown topics does not list the pool per message.
		key, how = p.lookup(host, port, rank, time.Now(), directoryMissRefresh)
	}
	return key, how
}

func (p *poolView) lookup(host, port string, rank int, now time.Time, maxAge time.Duration) (kvevents.SourceKey, kvevents.Resolution) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byAddr == nil || now.Sub(p.builtAt) > maxAge {
		p.byAddr = map[string][]kvevents.SourceKey{}
		for _, ep := range p.list() {
			src, _ := sourceOf(ep.GetMetadata())
			h, _ := splitTopicEndpoint(src.Endpoint)
			p.byAddr[h] = append(p.byAddr[h], src)
		}
		p.builtAt = now
	}
	var same []kvevents.SourceKey
	for _, src := range p.byAddr[host] {
		if src.Rank != rank {
			continue
		}
		if port != "" && src.Endpoint == joinHostPort(host, port) {
			return src, kvevents.ResolvedExact
		}
		same = append(same, src)
	}
	switch len(same) {
	case 0:
		return kvevents.SourceKey{}, kvevents.Unmatched
	case 1:
		return same[0], kvevents.ResolvedByAddress
	default:
		return kvevents.SourceKey{}, kvevents.Ambiguous
	}
}

// splitTopicEndpoint splits "address:port", "[v6]:port", "address" or a bare IPv6 address.
func splitTopicEndpoint(ep string) (host, port string) {
	if h, p, err := net.SplitHostPort(ep); err == nil {
		return h, p
	}
	return strings.TrimSuffix(strings.TrimPrefix(ep, "["), "]"), ""
}

func joinHostPort(host, port string) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + port
	}
	return host + ":" + port
}

// restartSignal is why an endpoint's blocks must go now, or "".
type restartSignal = string

// check compares the pool with what the subscribers hold and returns, per held endpoint that
// must lose its blocks, the reason: it left the pool, its metrics have not been scraped for
// unreachableAfter (the engine is down), or its process start time changed (it restarted).
// An engine that comes back is trusted again only through what it publishes next.
func (p *poolView) check(held []string, now time.Time, unreachableAfter time.Duration) map[string]restartSignal {
	eps := p.list()
	present := make(map[string]fwkdl.Endpoint, len(eps))
	for _, ep := range eps {
		src, _ := sourceOf(ep.GetMetadata())
		present[src.Endpoint] = ep
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	drop := map[string]restartSignal{}
	for key := range p.engines {
		if _, ok := present[key]; !ok {
			delete(p.engines, key)
		}
	}
	for key, ep := range present {
		seen := p.engines[key]
		if seen == nil {
			seen = &engineSeen{}
			p.engines[key] = seen
		}
		if m := ep.GetMetrics(); m != nil && !m.UpdateTime.IsZero() {
			stale := now.Sub(m.UpdateTime) > unreachableAfter
			if stale && !seen.down {
				drop[key] = kvevents.ResyncUnreachable
			}
			seen.down = stale
		}
		if em := engineMetrics(ep); em != nil && em.HasProcessStart {
			if seen.processStart != 0 && em.ProcessStart != seen.processStart {
				drop[key] = kvevents.ResyncEngineRestart
			}
			seen.processStart = em.ProcessStart
		}
	}
	for _, key := range held {
		if _, ok := present[key]; !ok {
			drop[key] = kvevents.ResyncRemoved
		}
	}
	return drop
}

// engineMetrics returns the engine attribute on ep (aibrix-engine-metrics-extractor fills
// it), or nil.
func engineMetrics(ep fwkdl.Endpoint) *engineattr.Metrics {
	switch e := ep.(type) {
	case interface{ GetAttributes() fwkdl.AttributeMap }:
		return engineattr.Get(e.GetAttributes())
	case engineattr.Getter:
		return engineattr.Get(e)
	}
	return nil
}

// watchPool drops, every interval, the blocks of endpoints that left the pool or whose
// engine went down or restarted: in central mode nothing else would tell until the
// restarted engine publishes again, and until then its old blocks would score.
func (c *Core) watchPool(ctx context.Context) {
	pluginkit.Every(ctx, c.watchInterval, func() { c.checkPool(time.Now()) })
}

func (c *Core) checkPool(now time.Time) {
	for key, reason := range c.pool.check(c.subs.Endpoints(), now, c.unreachableAfter) {
		if c.subs.ForgetEndpoint(key, reason) {
			c.log.Info("KV-event blocks dropped", "source", key, "reason", reason)
		}
		if reason == kvevents.ResyncRemoved && c.subs.Has(key) {
			// Discovery mode: stop dialling a publisher that is no longer in the pool.
			c.subs.Remove(key, 0)
			c.mu.Lock()
			for name, ref := range c.known {
				if ref.key == key {
					delete(c.known, name)
				}
			}
			c.mu.Unlock()
		}
	}
}
