package pdtokenledger

import (
	"context"
	"time"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// SweepResult counts what one janitor pass did.
type SweepResult struct {
	ForceReleased   int // parts released because they outlived their TTL
	Unconfirmed     int // requests released because PreRequest never confirmed them
	SessionsExpired int
	PodsPruned      int
}

// Sweep runs one janitor pass at the clock's current time: (a) forget sessions idle longer than
// the session TTL, (b) force-release, with a warning, every charge older than its own TTL and
// every charge of a request never confirmed within the unconfirmed timeout, (c) prune pods with
// no open charge that were not written since the previous pass, deleting their metric series.
func (t *Tracker) Sweep() SweepResult {
	now := t.clock.Now()
	var res SweepResult
	if t.p.SessionTTLSeconds > 0 {
		res.SessionsExpired = t.sessions.expire(now)
	}
	unconfirmed := time.Duration(t.p.UnconfirmedTimeoutSeconds) * time.Second
	t.mu.Lock()
	decodeChanged := false
	for id, e := range t.reqs {
		if unconfirmed > 0 && !e.confirmed && now.Sub(e.created) > unconfirmed {
			t.log.Info("Releasing token-load charges of a request that was never scheduled", "requestID", id, "age", now.Sub(e.created))
			if e.prefill != nil && (e.prefill.active || e.prefill.kv) {
				t.metrics.forceReleased.WithLabelValues("prefill", "unconfirmed").Inc()
			}
			if e.decode != nil && e.decode.open {
				t.metrics.forceReleased.WithLabelValues("decode", "unconfirmed").Inc()
			}
			decodeChanged = t.releaseLocked(id, e, true, true, true, now) || decodeChanged
			res.Unconfirmed++
			continue
		}
		if pp := e.prefill; pp != nil && (pp.active || pp.kv) && pp.ttl > 0 && now.Sub(pp.at) > pp.ttl {
			t.log.Info("Force-releasing a prefill charge older than its TTL", "requestID", id, "pod", pp.pod, "tokens", pp.tokens, "ttl", pp.ttl)
			t.metrics.forceReleased.WithLabelValues("prefill", "ttl").Inc()
			t.releaseLocked(id, e, true, true, false, now)
			res.ForceReleased++
		}
		if en := e.encode; en != nil && en.open && en.ttl > 0 && now.Sub(en.at) > en.ttl {
			t.log.Info("Force-releasing an encode lease older than its TTL", "requestID", id, "pods", en.pods, "ttl", en.ttl)
			t.metrics.forceReleased.WithLabelValues("encode", "ttl").Inc()
			t.releaseEncodeLocked(en, now)
			if e.done() {
				delete(t.reqs, id)
			}
			res.ForceReleased++
		}
		if dp := e.decode; dp != nil && dp.open && dp.ttl > 0 && now.Sub(dp.at) > dp.ttl {
			t.log.Info("Force-releasing a decode charge older than its TTL", "requestID", id, "pod", dp.pod, "tokens", dp.tokens, "ttl", dp.ttl)
			t.metrics.forceReleased.WithLabelValues("decode", "ttl").Inc()
			decodeChanged = t.releaseLocked(id, e, false, false, true, now) || decodeChanged
			res.ForceReleased++
		}
	}
	for k, ps := range t.pods {
		if ps.idle() && !ps.lastWrite.After(t.lastSweep) {
			delete(t.pods, k)
			t.metrics.deletePod(k)
			res.PodsPruned++
		}
	}
	for k, s := range t.rates {
		if now.Sub(s.at) > rateFreshness {
			delete(t.rates, k)
		}
	}
	for k, at := range t.interest {
		if now.Sub(at) > interestTTL {
			delete(t.interest, k)
		}
	}
	t.lastSweep = now
	t.mu.Unlock()
	if decodeChanged && t.notify != nil {
		t.notify()
	}
	return res
}

// runJanitor sweeps every JanitorIntervalSeconds until ctx ends.
func (t *Tracker) runJanitor(ctx context.Context) {
	pluginkit.Every(ctx, time.Duration(t.p.JanitorIntervalSeconds)*time.Second, func() {
		if t.external.Load() {
			return // SetClock: swept on the clock's owner's time
		}
		if r := t.Sweep(); r != (SweepResult{}) {
			t.log.V(1).Info("Token-load janitor pass", "forceReleased", r.ForceReleased, "unconfirmed", r.Unconfirmed,
				"sessionsExpired", r.SessionsExpired, "podsPruned", r.PodsPruned)
		}
	})
}

// PodSnapshot is one pod's ledger state.
type PodSnapshot struct {
	ActiveTokens, KVTokens, DecodeTokens float64
	ActiveCharges, KVCharges             int
	DecodeCharges                        int
	EncodeCharges                        int
}

// Snapshot is a copy of the ledger's state, for tests, debugging and the soak invariants.
type Snapshot struct {
	Pods         map[tokenload.PodKey]PodSnapshot
	OpenRequests int
	Sessions     int
	RemotePods   int // pods with other replicas' charges in the shared-ledger cache
	// SharedDegraded: the last Redis sync failed and the scores use the local ledger only
	// (false without sharing).
	SharedDegraded bool
}

// Snapshot copies the ledger's state.
func (t *Tracker) Snapshot() Snapshot {
	t.mu.Lock()
	s := Snapshot{Pods: make(map[tokenload.PodKey]PodSnapshot, len(t.pods)), OpenRequests: len(t.reqs), RemotePods: len(t.remote)}
	for k, ps := range t.pods {
		s.Pods[k] = PodSnapshot{ActiveTokens: ps.active, KVTokens: ps.kv, DecodeTokens: ps.decTokens,
			ActiveCharges: ps.activeN, KVCharges: ps.kvN, DecodeCharges: ps.decN, EncodeCharges: ps.encN}
	}
	t.mu.Unlock()
	s.Sessions = t.sessions.size()
	s.SharedDegraded = t.shared != nil && t.shared.degraded.Load()
	return s
}
