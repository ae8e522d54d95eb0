package aibrixpdpair

import (
	"sync"
	"time"
)

// Tracker counts, per pod key, the prefill requests pdgate sent and whose prefill leg has not
// finished (AIBrix's PrefillRequestTracker), the decode picks whose request has not started
// running on the decode pod yet (AIBrix's PendingDecodeTracker), and the prompt tokens decode
// pods were sent to prefill themselves and have not answered yet (remaining.go's local queue). Entries are keyed by request
// ID so every release is idempotent; entries older than ttl are swept (a request whose response
// never reached the EPP must not count forever).
type Tracker struct {
	mu      sync.Mutex
	prefill map[string]int
	pending map[string]int
	local   map[string]float64
	reqs    map[string]trackEntry // values, not pointers: an entry per request was an allocation
	ttl     time.Duration
	now     func() time.Time
	swept   time.Time
}

type trackEntry struct {
	prefillPod, decodePod string
	// localTokens on localPod: the decode pod prefills them itself (RegisterLocal)
	localPod    string
	localTokens float64
	at          time.Time
}

// NewTracker returns an empty tracker.
func NewTracker(ttl time.Duration, now func() time.Time) *Tracker {
	if now == nil {
		now = time.Now
	}
	return &Tracker{prefill: map[string]int{}, pending: map[string]int{}, local: map[string]float64{}, reqs: map[string]trackEntry{}, ttl: ttl, now: now}
}

// SetClock replaces the tracker's time source (the TTL sweep's clock): `pdgate bench sim`
// runs it on virtual time.
func (t *Tracker) SetClock(now func() time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.now = now
}

// PrefillCount returns a pod's in-flight prefill count.
func (t *Tracker) PrefillCount(pod string) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return float64(t.prefill[pod])
}

// PendingDecode returns a pod's pending decode count.
func (t *Tracker) PendingDecode(pod string) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return float64(t.pending[pod])
}

// LocalTokens returns the prompt tokens a decode pod was sent to prefill itself whose first
// token the EPP has not seen.
func (t *Tracker) LocalTokens(pod string) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.local[pod]
}

// RegisterLocal records a decode-only pick whose decode pod prefills tokens itself: a pending
// decode, and tokens of local prefill until the response headers arrive.
func (t *Tracker) RegisterLocal(requestID, decodePod string, tokens float64) {
	t.Register(requestID, "", decodePod)
	t.mu.Lock()
	defer t.mu.Unlock()
	if e, ok := t.reqs[requestID]; ok && tokens > 0 {
		e.localPod, e.localTokens = decodePod, tokens
		t.reqs[requestID] = e
		t.local[decodePod] += tokens
	}
}

// Register records a pick (prefillPod may be empty). A second registration of the same request
// replaces the first.
func (t *Tracker) Register(requestID, prefillPod, decodePod string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releaseLocked(requestID, true, true)
	e := trackEntry{prefillPod: prefillPod, decodePod: decodePod, at: t.now()}
	if prefillPod != "" {
		t.prefill[prefillPod]++
	}
	if decodePod != "" {
		t.pending[decodePod]++
	}
	t.reqs[requestID] = e
	t.sweepLocked()
}

// Started releases the request's counts: the prefill leg is over and the decode pod runs it
// (the EPP sees the response headers).
func (t *Tracker) Started(requestID string) { t.release(requestID, true, true) }

// Done releases whatever the request still holds.
func (t *Tracker) Done(requestID string) { t.release(requestID, true, true) }

func (t *Tracker) release(requestID string, prefill, pending bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.releaseLocked(requestID, prefill, pending)
}

func (t *Tracker) releaseLocked(requestID string, prefill, pending bool) {
	e, ok := t.reqs[requestID]
	if !ok {
		return
	}
	if prefill && e.prefillPod != "" {
		dec(t.prefill, e.prefillPod)
		e.prefillPod = ""
	}
	if prefill && e.localPod != "" {
		// a sum of floats: drop the entry once what is left is rounding, not tokens
		if t.local[e.localPod] -= e.localTokens; t.local[e.localPod] < 0.5 {
			delete(t.local, e.localPod)
		}
		e.localPod = ""
	}
	if pending && e.decodePod != "" {
		dec(t.pending, e.decodePod)
		e.decodePod = ""
	}
	if e.prefillPod == "" && e.decodePod == "" && e.localPod == "" {
		delete(t.reqs, requestID)
		return
	}
	t.reqs[requestID] = e
}

func dec(m map[string]int, k string) {
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}

func (t *Tracker) sweepLocked() {
	if t.ttl <= 0 {
		return
	}
	now := t.now()
	if now.Sub(t.swept) < time.Second {
		return
	}
	t.swept = now
	for id, e := range t.reqs {
		if now.Sub(e.at) > t.ttl {
			t.releaseLocked(id, true, true)
		}
	}
}

// Len returns the number of tracked requests (tests, metrics).
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.reqs)
}
