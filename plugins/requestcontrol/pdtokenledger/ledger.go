package pdtokenledger

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// Clock is the time source; tests inject a fake one.
type Clock interface{ Now() time.Time }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// rateFreshness bounds how long a pod's last measured generation rate counts towards the
// mean rate used for pods without metrics.
const rateFreshness = 30 * time.Second

// interestTTL is how long a decode pod queried by a scorer stays in the set of pods whose
// remote (other replicas') charges are read from Redis.
const interestTTL = 2 * time.Minute

// Options configure a Tracker.
type Options struct {
	Params  Params
	Clock   Clock    // nil: wall clock
	Metrics *Metrics // nil: new metrics registered on Registerer
	// Registerer receives the metrics NewTracker creates and AIBrix's gauge names; nil: a
	// private registry (nothing process-wide).
	Registerer prometheus.Registerer
	Logger     logr.Logger // zero value: discard
}

// podState is one pod's counters. The counts let a counter return to exactly zero when its
// last open charge is released, whatever float rounding happened on the way.
type podState struct {
	active, kv       float64
	activeN, kvN     int
	decTokens        float64
	decN             int
	decSumRel        float64 // Σ decode charge times, seconds since the tracker epoch
	decOut           float64 // Σ output budgets of the open decode charges that carry one
	decOutN          int     // how many carry one
	encN             int     // open encode leases: requests this pod is encoding
	lastWrite        time.Time
	gActive, gKV, gD gaugeSetter
	gSlots, gEnc     prometheus.Gauge
}

func (ps *podState) idle() bool {
	return ps.activeN == 0 && ps.kvN == 0 && ps.decN == 0 && ps.encN == 0
}

type prefillPart struct {
	pod        tokenload.PodKey
	tokens     float64
	at         time.Time
	ttl        time.Duration
	active, kv bool // still open
}

type decodePart struct {
	pod    tokenload.PodKey
	tokens float64
	out    float64 // output budget, 0 = unknown
	at     time.Time
	atRel  float64
	ttl    time.Duration
	open   bool
}

// encodePart is a request's encode work: one lease on each encoder it was sent to.
type encodePart struct {
	pods []tokenload.PodKey
	at   time.Time
	ttl  time.Duration
	open bool
}

// reqEntry holds a request's charges. Each part is released at most once.
type reqEntry struct {
	created   time.Time
	confirmed bool
	output    float64 // the request's output budget once recorded (a later decode charge carries it)
	prefill   *prefillPart
	decode    *decodePart
	encode    *encodePart
}

func (e *reqEntry) done() bool {
	return (e.prefill == nil || (!e.prefill.active && !e.prefill.kv)) && (e.decode == nil || !e.decode.open) &&
		(e.encode == nil || !e.encode.open)
}

type rateSample struct {
	rate float64
	at   time.Time
}

// remoteAgg is the sum of the other live replicas' decode charges on one pod (Redis clock).
type remoteAgg struct {
	tokens   float64
	charges  float64
	sumAt    float64 // Σ charge times, Unix seconds on the Redis clock
	output   float64 // Σ output budgets of the charges that carry one
	budgeted float64 // how many carry one
	// the open prefill active parts (prefill work queued or running), which only admission
	// forecasts read: the prefill scores stay local, as in AIBrix
	prefillTokens, prefillLegs float64
}

// Tracker is the token-load ledger. It implements Ledger.
type Tracker struct {
	p        Params
	clock    Clock
	epoch    time.Time
	metrics  *Metrics
	log      logr.Logger
	sessions *sessionTable

	mu          sync.Mutex
	pods        map[tokenload.PodKey]*podState
	reqs        map[string]*reqEntry
	rates       map[tokenload.PodKey]rateSample
	interest    map[tokenload.PodKey]time.Time
	remote      map[tokenload.PodKey]remoteAgg
	redisOffset float64 // Redis clock − local clock, seconds
	lastSweep   time.Time
	notify      func() // wakes the shared-ledger publisher; nil without Redis
	shared      *sharedLedger
	started     sync.Once
	external    atomic.Bool // SetClock: the owner of the clock runs Sweep
}

var (
	_ tokenload.Ledger      = (*Tracker)(nil)
	_ tokenload.LeaseReader = (*Tracker)(nil)
)

// NewTracker builds a ledger. Params must be valid (see Params.Validate).
func NewTracker(o Options) *Tracker {
	if o.Clock == nil {
		o.Clock = realClock{}
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	if o.Metrics == nil {
		// A fresh registry cannot hold a conflicting collector; Factory passes the EPP's
		// registerer and its own Metrics, and reports a conflict there.
		o.Metrics, _ = NewMetrics(o.Registerer)
	}
	if o.Params.AIBrixMetricNames {
		o.Metrics.EnableAIBrixNames(o.Registerer)
	}
	now := o.Clock.Now()
	t := &Tracker{
		p: o.Params, clock: o.Clock, epoch: now, metrics: o.Metrics, log: o.Logger,
		pods: map[tokenload.PodKey]*podState{}, reqs: map[string]*reqEntry{}, rates: map[tokenload.PodKey]rateSample{},
		interest: map[tokenload.PodKey]time.Time{}, remote: map[tokenload.PodKey]remoteAgg{}, lastSweep: now,
	}
	t.sessions = newSessionTable(o.Params.MaxSessions, time.Duration(o.Params.SessionTTLSeconds)*time.Second, o.Metrics, o.Logger)
	if o.Params.SharingEnabled() {
		t.shared = t.enableSharing()
	}
	return t
}

// SetClock puts the ledger on c's time (`pdgate bench sim` runs it on virtual time), before
// its first charge: the epoch and the last sweep restart at c's now, and the background
// janitor, whose ticker is the wall clock's, stops sweeping: the caller runs Sweep every
// Params().JanitorIntervalSeconds of c's time.
func (t *Tracker) SetClock(c Clock) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.clock = c
	t.epoch = c.Now()
	t.lastSweep = t.epoch
	t.external.Store(true)
}

// Start runs the janitor and, with Redis configured, the shared-ledger sync until ctx ends.
// Calling it again does nothing.
func (t *Tracker) Start(ctx context.Context) {
	t.started.Do(func() {
		go t.runJanitor(ctx)
		if t.shared != nil {
			go t.shared.run(ctx)
		}
	})
}

// ReplicaID is this ledger's field name in the shared decode ledger ("" without Redis).
func (t *Tracker) ReplicaID() string {
	if t.shared == nil {
		return ""
	}
	return t.shared.id
}

// Params returns the tracker's configuration.
func (t *Tracker) Params() Params { return t.p }

// TokenLoadDefaults implements Provider's policy values.
func (t *Tracker) TokenLoadDefaults() tokenload.Defaults { return t.p.Defaults() }

// Atomically runs fn with the ledger locked: reads and charges inside fn see one state.
func (t *Tracker) Atomically(fn func(tx tokenload.Tx)) {
	t.mu.Lock()
	x := &tx{t: t, now: t.clock.Now()}
	x.nowRel = x.now.Sub(t.epoch).Seconds()
	func() {
		defer t.mu.Unlock()
		fn(x)
	}()
	if x.sharedChanged && t.notify != nil {
		t.notify()
	}
}

// NewTokens implements Ledger (rules in the package README: session delta, prefix share, prompt).
func (t *Tracker) NewTokens(model, sessionKey string, promptTokens int, matchPct int) int {
	if promptTokens <= 0 {
		return 0
	}
	if sessionKey != "" {
		if prev, ok := t.sessions.observe(model, sessionKey, promptTokens, t.clock.Now()); ok && prev < promptTokens {
			return promptTokens - prev
		}
	}
	if matchPct >= 0 {
		m := min(matchPct, 100)
		return promptTokens * (100 - m) / 100
	}
	return promptTokens
}

// Confirm marks a request as scheduled (PreRequest ran), exempting it from the
// unconfirmed-charge sweep.
func (t *Tracker) Confirm(requestID string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.reqs[requestID]; e != nil {
		e.confirmed = true
	}
}

// ReleasePrefillActive implements Ledger: the prefill leg is done.
func (t *Tracker) ReleasePrefillActive(requestID string) { t.release(requestID, true, false, false) }

// ReleasePrefill releases both prefill parts (the prefill leg failed or was skipped: no KV stays
// on the prefill pod) and keeps the decode charge.
func (t *Tracker) ReleasePrefill(requestID string) { t.release(requestID, true, true, false) }

// ReleaseAll implements Ledger: completion, failure or disconnect.
func (t *Tracker) ReleaseAll(requestID string) { t.release(requestID, true, true, true) }

func (t *Tracker) release(id string, active, kv, decode bool) {
	t.mu.Lock()
	e := t.reqs[id]
	if e == nil {
		t.mu.Unlock()
		return
	}
	now := t.clock.Now()
	changed := t.releaseLocked(id, e, active, kv, decode, now)
	t.mu.Unlock()
	if changed && t.notify != nil {
		t.notify()
	}
}

// releaseLocked closes the named parts of e and reports whether a shared lease (a decode charge or a
// prefill active part) changed.
// The encode part goes with the active one: every release that ends the prefill leg (the
// callback, the response headers, the end of stream) comes after the encoders answered.
func (t *Tracker) releaseLocked(id string, e *reqEntry, active, kv, decode bool, now time.Time) bool {
	if en := e.encode; active && en != nil && en.open {
		t.releaseEncodeLocked(en, now)
	}
	changed := false
	if pp := e.prefill; pp != nil {
		ps := t.pod(pp.pod, now)
		if active && pp.active {
			pp.active = false
			ps.activeN--
			ps.active = settle(ps.active-pp.tokens, ps.activeN)
			ps.gActive.Set(ps.active)
			changed = true // the shared prefill lease
		}
		if kv && pp.kv {
			pp.kv = false
			ps.kvN--
			ps.kv = settle(ps.kv-pp.tokens, ps.kvN)
			ps.gKV.Set(ps.kv)
		}
	}
	if dp := e.decode; decode && dp != nil && dp.open {
		dp.open = false
		ps := t.pod(dp.pod, now)
		ps.decN--
		ps.decTokens = settle(ps.decTokens-dp.tokens, ps.decN)
		ps.decSumRel = settle(ps.decSumRel-dp.atRel, ps.decN)
		if dp.out > 0 {
			ps.decOutN--
			ps.decOut = settle(ps.decOut-dp.out, ps.decOutN)
		}
		ps.gD.Set(ps.decTokens)
		ps.gSlots.Set(float64(ps.decN))
		changed = true
	}
	if e.done() {
		delete(t.reqs, id)
	}
	return changed
}

// settle clamps a counter at zero and snaps it to exactly zero when no charge is open.
func settle(v float64, open int) float64 {
	if open <= 0 || v < 0 || math.IsNaN(v) {
		return 0
	}
	return v
}

// pod returns (creating) a pod's state and marks it written.
func (t *Tracker) pod(k tokenload.PodKey, now time.Time) *podState {
	ps := t.pods[k]
	if ps == nil {
		ps = &podState{}
		ps.gActive, ps.gKV, ps.gD = t.metrics.podGauges(k)
		t.pods[k] = ps
	}
	ps.lastWrite = now
	return ps
}

func (t *Tracker) entry(id string, now time.Time) *reqEntry {
	e := t.reqs[id]
	if e == nil {
		e = &reqEntry{created: now}
		t.reqs[id] = e
	}
	return e
}
