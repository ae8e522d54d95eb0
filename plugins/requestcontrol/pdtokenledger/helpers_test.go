package pdtokenledger

import (
	"sync"
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// testParams are the defaults without any environment.
func testParams(t testing.TB) Params {
	t.Helper()
	p, err := DefaultParams(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newTestTracker(t testing.TB, mut func(*Params)) (*Tracker, *fakeClock, *Metrics) {
	t.Helper()
	p := testParams(t)
	if mut != nil {
		mut(&p)
	}
	if err := p.Validate(); err != nil {
		t.Fatalf("params: %v", err)
	}
	m, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	c := newFakeClock()
	return NewTracker(Options{Params: p, Clock: c, Metrics: m}), c, m
}

func chargeBoth(tr *Tracker, id string, prefill, decode tokenload.PodKey, pTokens, dTokens float64) {
	tr.Atomically(func(tx tokenload.Tx) {
		tx.ChargePrefill(tokenload.PrefillCharge{RequestID: id, Pod: prefill, Tokens: pTokens, TTL: time.Hour})
		tx.ChargeDecode(tokenload.DecodeCharge{RequestID: id, Pod: decode, Tokens: dTokens, TTL: time.Hour})
	})
}

func prefillOf(tr *Tracker, pod tokenload.PodKey) (out tokenload.PrefillLoad) {
	tr.Atomically(func(tx tokenload.Tx) { out = tx.Prefill(pod) })
	return out
}

func decodeOf(tr *Tracker, pod tokenload.PodKey, rate tokenload.DecodeRate) (out float64) {
	tr.Atomically(func(tx tokenload.Tx) { out = tx.Decode(pod, rate) })
	return out
}
