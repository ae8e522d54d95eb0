package pdtokenledger

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// warnEvery rate-limits the "Redis unreachable" warning.
const warnEvery = 30 * time.Second

// sharedLedger publishes this replica's decode charges to Redis and caches the other live
// replicas' charges in Tracker.remote. Every sync is one pipelined round trip; the scheduling
// path only reads the cache, so Redis never adds latency to a request.
type sharedLedger struct {
	t       *Tracker
	client  *redis.Client
	p       RedisParams
	id      string
	trigger chan struct{}

	// owned by the sync goroutine
	published map[tokenload.PodKey]bool     // pods whose field this replica has written
	prefills  map[tokenload.PodKey]bool     // pods whose prefill field this replica has written
	dead      map[tokenload.PodKey][]string // fields of dead replicas to delete on the next sync
	lastWarn  time.Time

	// degraded is set by the sync goroutine and read by Snapshot: the last sync failed, so the
	// scores use the local ledger only.
	degraded atomic.Bool
}

// redisLogger sends go-redis's internal messages (one per failed dial while Redis is down) to
// V(2); the ledger logs its own rate-limited warning instead.
type redisLogger struct{ log logr.Logger }

func (l redisLogger) Printf(_ context.Context, format string, v ...any) {
	l.log.V(2).Info("go-redis", "detail", fmt.Sprintf(format, v...))
}

var redisLogOnce sync.Once

func newReplicaID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "epp"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return strings.NewReplacer(",", "-", " ", "-").Replace(host) + "-" + hex.EncodeToString(b[:])
}

// enableSharing wires the Redis-shared decode ledger into t; Start runs it.
func (t *Tracker) enableSharing() *sharedLedger {
	p := t.p.Redis
	if p.ReplicaID == "" {
		p.ReplicaID = newReplicaID()
	}
	timeout := time.Duration(p.TimeoutMS) * time.Millisecond
	s := &sharedLedger{
		t: t, p: p, id: p.ReplicaID, trigger: make(chan struct{}, 1),
		published: map[tokenload.PodKey]bool{}, prefills: map[tokenload.PodKey]bool{}, dead: map[tokenload.PodKey][]string{},
		client: redis.NewClient(&redis.Options{
			Addr: p.Address, DB: p.DB, Password: p.password, Protocol: 2, DisableIdentity: true,
			DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout, PoolTimeout: timeout,
			MaxRetries: -1, PoolSize: 2, ContextTimeoutEnabled: true,
			DialerRetries: 1, DialerRetryTimeout: timeout,
			MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		}),
	}
	redisLogOnce.Do(func() { redis.SetLogger(redisLogger{log: t.log}) })
	t.notify = func() {
		select {
		case s.trigger <- struct{}{}:
		default:
		}
	}
	return s
}

func (s *sharedLedger) podKey(k tokenload.PodKey) string { return s.p.KeyPrefix + string(k) }

// prefillKey holds a pod's open prefill active parts, one field per replica: the prefill work
// each replica has queued there, which admission forecasts add up.
func (s *sharedLedger) prefillKey(k tokenload.PodKey) string {
	return s.p.KeyPrefix + "prefill:" + string(k)
}

// budgetKey holds a pod's output budgets, one field per replica, apart from the pod's hash:
// that hash keeps AIBrix's three-field value, which AIBrix gateways sharing the Redis parse.
func (s *sharedLedger) budgetKey(k tokenload.PodKey) string {
	return s.p.KeyPrefix + "budget:" + string(k)
}
func (s *sharedLedger) replicasKey() string { return s.p.KeyPrefix + "replicas" }

// run syncs on every local change and at least every SyncIntervalMS until ctx ends.
func (s *sharedLedger) run(ctx context.Context) {
	defer s.client.Close()
	tk := time.NewTicker(time.Duration(s.p.SyncIntervalMS) * time.Millisecond)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			s.withdraw()
			return
		case <-tk.C:
		case <-s.trigger:
		}
		s.sync(ctx)
	}
}

type ownValue struct {
	pod           tokenload.PodKey
	value, budget string
}

// syncPlan is what one sync publishes, deletes and reads.
type syncPlan struct {
	own, ownPrefill   []ownValue         // this replica's non-zero pods
	zero, zeroPrefill []tokenload.PodKey // pods it published before and holds nothing on now
	read              []tokenload.PodKey // pods whose other replicas' shares it reads
	offset            float64
}

// snapshot collects what to publish and which pods to read, under the ledger lock.
func (s *sharedLedger) snapshot() syncPlan {
	t := s.t
	t.mu.Lock()
	defer t.mu.Unlock()
	pl := syncPlan{offset: t.redisOffset}
	epochUnix := float64(t.epoch.UnixNano()) / 1e9
	seen, seenPrefill := map[tokenload.PodKey]bool{}, map[tokenload.PodKey]bool{}
	for k, ps := range t.pods {
		if ps.decN > 0 {
			n := float64(ps.decN)
			sumAt := ps.decSumRel + n*epochUnix + n*pl.offset
			pl.own = append(pl.own, ownValue{pod: k, value: FormatSharedValue(ps.decTokens, ps.decN, sumAt),
				budget: FormatSharedBudget(ps.decOut, ps.decOutN)})
			seen[k] = true
		}
		if ps.activeN > 0 {
			pl.ownPrefill = append(pl.ownPrefill, ownValue{pod: k, value: FormatSharedPrefill(ps.active, ps.activeN)})
			seenPrefill[k] = true
		}
	}
	for k := range s.published {
		if !seen[k] {
			pl.zero = append(pl.zero, k)
		}
	}
	for k := range s.prefills {
		if !seenPrefill[k] {
			pl.zeroPrefill = append(pl.zeroPrefill, k)
		}
	}
	for k := range t.interest {
		pl.read = append(pl.read, k)
	}
	return pl
}

// sync is one pipelined round trip: TIME, heartbeat, publish, prune, read live replicas and
// the interesting pods' hashes.
func (s *sharedLedger) sync(ctx context.Context) {
	pl := s.snapshot()
	own, zero, read, offset := pl.own, pl.zero, pl.read, pl.offset
	ctx, cancel := context.WithTimeout(ctx, time.Duration(s.p.TimeoutMS)*time.Millisecond)
	defer cancel()
	before := time.Now()
	nowRedisMS := float64(before.UnixNano())/1e6 + offset*1000
	cutoff := nowRedisMS - float64(s.p.LivenessTTLSeconds)*1000
	keyTTL := time.Duration(s.p.KeyTTLSeconds) * time.Second

	pipe := s.client.Pipeline()
	timeCmd := pipe.Time(ctx)
	pipe.ZAdd(ctx, s.replicasKey(), redis.Z{Score: nowRedisMS, Member: s.id})
	pipe.ZRemRangeByScore(ctx, s.replicasKey(), "-inf", "("+strconv.FormatFloat(cutoff, 'f', 0, 64))
	pipe.PExpire(ctx, s.replicasKey(), keyTTL)
	for _, o := range own {
		pipe.HSet(ctx, s.podKey(o.pod), s.id, o.value)
		pipe.PExpire(ctx, s.podKey(o.pod), keyTTL)
		pipe.HSet(ctx, s.budgetKey(o.pod), s.id, o.budget)
		pipe.PExpire(ctx, s.budgetKey(o.pod), keyTTL)
	}
	for _, o := range pl.ownPrefill {
		pipe.HSet(ctx, s.prefillKey(o.pod), s.id, o.value)
		pipe.PExpire(ctx, s.prefillKey(o.pod), keyTTL)
	}
	for _, k := range zero {
		pipe.HDel(ctx, s.podKey(k), s.id)
		pipe.HDel(ctx, s.budgetKey(k), s.id)
	}
	for _, k := range pl.zeroPrefill {
		pipe.HDel(ctx, s.prefillKey(k), s.id)
	}
	for k, fields := range s.dead {
		pipe.HDel(ctx, s.podKey(k), fields...)
		pipe.HDel(ctx, s.budgetKey(k), fields...)
		pipe.HDel(ctx, s.prefillKey(k), fields...)
	}
	liveCmd := pipe.ZRangeByScore(ctx, s.replicasKey(), &redis.ZRangeBy{Min: strconv.FormatFloat(cutoff, 'f', 0, 64), Max: "+inf"})
	reads := make([]*redis.MapStringStringCmd, len(read))
	budgets := make([]*redis.MapStringStringCmd, len(read))
	prefills := make([]*redis.MapStringStringCmd, len(read))
	for i, k := range read {
		reads[i] = pipe.HGetAll(ctx, s.podKey(k))
		budgets[i] = pipe.HGetAll(ctx, s.budgetKey(k))
		prefills[i] = pipe.HGetAll(ctx, s.prefillKey(k))
	}
	_, err := pipe.Exec(ctx)
	after := time.Now()
	if err != nil {
		s.fail(err, after)
		return
	}
	s.t.metrics.sharedSyncs.WithLabelValues("ok").Inc()
	if s.setDegraded(false) {
		s.t.log.Info("Shared decode ledger reachable again; sharing resumed", "redis", s.p.Address)
	}
	for _, o := range own {
		s.published[o.pod] = true
	}
	for _, k := range zero {
		delete(s.published, k)
	}
	for _, o := range pl.ownPrefill {
		s.prefills[o.pod] = true
	}
	for _, k := range pl.zeroPrefill {
		delete(s.prefills, k)
	}
	clear(s.dead)

	mid := before.Add(after.Sub(before) / 2)
	newOffset := float64(timeCmd.Val().UnixNano()-mid.UnixNano()) / 1e9
	live := map[string]bool{}
	for _, id := range liveCmd.Val() {
		live[id] = true
	}
	remote := make(map[tokenload.PodKey]remoteAgg, len(read))
	replicas := map[string]bool{}
	for i, k := range read {
		var agg remoteAgg
		for field, v := range reads[i].Val() {
			if field == s.id {
				continue
			}
			if !live[field] {
				s.dead[k] = append(s.dead[k], field)
				continue
			}
			tokens, charges, sumAt, perr := ParseSharedValue(v)
			if perr != nil {
				s.t.log.V(1).Info("Ignoring malformed shared ledger field", "key", s.podKey(k), "field", field, "err", perr)
				continue
			}
			if charges <= 0 {
				continue
			}
			replicas[field] = true
			agg.tokens += max(0, tokens)
			agg.charges += float64(charges)
			agg.sumAt += sumAt
			// a replica of an earlier release (or an AIBrix gateway) writes no budgets: its
			// charges take the mean output budget
			if bv, ok := budgets[i].Val()[field]; ok {
				if out, n, berr := ParseSharedBudget(bv); berr == nil && n <= charges {
					agg.output += out
					agg.budgeted += float64(n)
				}
			}
		}
		s.addPrefills(k, prefills[i].Val(), live, &agg, replicas)
		if agg.charges > 0 || agg.prefillLegs > 0 {
			remote[k] = agg
		}
	}
	s.t.metrics.remoteReplicas.Set(float64(len(replicas)))
	s.t.mu.Lock()
	s.t.remote = remote
	s.t.redisOffset = newOffset
	s.t.mu.Unlock()
}

// fail degrades to the local ledger: remote values are dropped (they would only go stale).
func (s *sharedLedger) fail(err error, now time.Time) {
	s.t.metrics.sharedSyncs.WithLabelValues("error").Inc()
	s.t.mu.Lock()
	s.t.remote = map[tokenload.PodKey]remoteAgg{}
	s.t.mu.Unlock()
	s.t.metrics.remoteReplicas.Set(0)
	if s.setDegraded(true) || now.Sub(s.lastWarn) >= warnEvery {
		s.t.log.Info("Shared decode ledger unreachable; scoring with the local ledger only", "redis", s.p.Address, "err", err.Error())
		s.lastWarn = now
	}
}

// setDegraded records the outcome of a sync in the degraded gauge and reports whether it
// changed the state; every change into the degraded state counts as one fallback, so an alert
// can tell a flapping Redis (many fallbacks) from one long outage (one fallback, gauge held at 1).
func (s *sharedLedger) setDegraded(d bool) (changed bool) {
	if s.degraded.Swap(d) == d {
		return false
	}
	if d {
		s.t.metrics.sharedDegraded.Set(1)
		s.t.metrics.sharedFallbacks.Inc()
	} else {
		s.t.metrics.sharedDegraded.Set(0)
	}
	return true
}

// withdraw removes this replica's fields and heartbeat on shutdown (best effort).
func (s *sharedLedger) withdraw() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(s.p.TimeoutMS)*time.Millisecond)
	defer cancel()
	pipe := s.client.Pipeline()
	for k := range s.published {
		pipe.HDel(ctx, s.podKey(k), s.id)
		pipe.HDel(ctx, s.budgetKey(k), s.id)
	}
	for k := range s.prefills {
		pipe.HDel(ctx, s.prefillKey(k), s.id)
	}
	pipe.ZRem(ctx, s.replicasKey(), s.id)
	_, _ = pipe.Exec(ctx)
}

// addPrefills adds the other live replicas' prefill fields of pod k to agg; a dead replica's
// field is deleted on the next sync, with its decode fields.
func (s *sharedLedger) addPrefills(k tokenload.PodKey, fields map[string]string, live map[string]bool, agg *remoteAgg, replicas map[string]bool) {
	for field, v := range fields {
		if field == s.id {
			continue
		}
		if !live[field] {
			if !slices.Contains(s.dead[k], field) {
				s.dead[k] = append(s.dead[k], field)
			}
			continue
		}
		tokens, legs, err := ParseSharedPrefill(v)
		if err != nil {
			s.t.log.V(1).Info("Ignoring malformed shared ledger field", "key", s.prefillKey(k), "field", field, "err", err)
			continue
		}
		if legs > 0 {
			replicas[field] = true
			agg.prefillTokens += tokens
			agg.prefillLegs += float64(legs)
		}
	}
}
