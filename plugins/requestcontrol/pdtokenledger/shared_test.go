package pdtokenledger

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// newSharedTracker is a tracker whose shared decode ledger points at addr (nothing runs until
// the test starts it or calls its sync).
func newSharedTracker(t *testing.T, addr string, timeoutMS int) (*Tracker, *Metrics) {
	t.Helper()
	tr, _, m := newTestTracker(t, func(p *Params) {
		p.SharedLedger = true
		p.Redis.Address = addr
		p.Redis.ReplicaID = "r1"
		p.Redis.TimeoutMS = timeoutMS
	})
	if tr.shared == nil {
		t.Fatal("sharing not enabled")
	}
	return tr, m
}

// The degraded gauge follows the last sync; the fallback counter counts entries into the
// degraded state, not failed syncs, so one long outage is one fallback.
func TestSharedDegradedMetric(t *testing.T) {
	cases := []struct {
		name          string
		syncs         []bool // true: the sync succeeded
		wantDegraded  bool
		wantFallbacks float64
	}{
		{"no sync yet", nil, false, 0},
		{"healthy", []bool{true, true}, false, 0},
		{"one outage of three failed syncs", []bool{true, false, false, false}, true, 1},
		{"unreachable from the start", []bool{false}, true, 1},
		{"outage then rejoin", []bool{true, false, false, true}, false, 1},
		{"flapping", []bool{false, true, false, true, false}, true, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, m := newSharedTracker(t, "127.0.0.1:1", 50)
			for _, ok := range tc.syncs {
				if ok {
					tr.shared.setDegraded(false)
				} else {
					tr.shared.fail(errors.New("connection refused"), time.Now())
				}
			}
			want := 0.0
			if tc.wantDegraded {
				want = 1
			}
			if got := testutil.ToFloat64(m.sharedDegraded); got != want {
				t.Errorf("pdgate_token_load_shared_degraded = %v, want %v", got, want)
			}
			if got := testutil.ToFloat64(m.sharedFallbacks); got != tc.wantFallbacks {
				t.Errorf("pdgate_token_load_shared_fallbacks_total = %v, want %v", got, tc.wantFallbacks)
			}
			if got := tr.Snapshot().SharedDegraded; got != tc.wantDegraded {
				t.Errorf("Snapshot().SharedDegraded = %v, want %v", got, tc.wantDegraded)
			}
		})
	}
}

// A ledger without Redis is never degraded.
func TestLocalLedgerNeverDegraded(t *testing.T) {
	tr, _, m := newTestTracker(t, nil)
	if tr.Snapshot().SharedDegraded || testutil.ToFloat64(m.sharedDegraded) != 0 {
		t.Fatal("a local-only ledger reports degraded")
	}
}

// blackhole accepts connections and reads from them but never answers: a Redis that hangs.
// got is closed once a client has sent its first bytes (a sync is waiting on the reply);
// closed once the client gave up on the connection.
type blackhole struct {
	addr        string
	got, closed chan struct{}
	once1       sync.Once
	once2       sync.Once
}

func startBlackhole(t *testing.T) *blackhole {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{addr: l.Addr().String(), got: make(chan struct{}), closed: make(chan struct{})}
	t.Cleanup(func() { _ = l.Close() })
	go b.serve(l)
	return b
}

func (b *blackhole) serve(l net.Listener) {
	for c, err := l.Accept(); err == nil; c, err = l.Accept() {
		go b.hold(c)
	}
}

// hold reads c until the client closes it, answering nothing.
func (b *blackhole) hold(c net.Conn) {
	defer c.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := c.Read(buf); err != nil {
			b.once2.Do(func() { close(b.closed) })
			return
		}
		b.once1.Do(func() { close(b.got) })
	}
}

// A Redis failure never blocks or fails a request: charges, scores and releases run on the
// local ledger while a sync hangs on Redis or fails at once, the sync ends within its timeout,
// and the replica says it is degraded.
func TestRedisFailureNeverBlocksRequests(t *testing.T) {
	const timeoutMS = 1000 // the longest allowed: the request path must not wait for any of it
	cases := []struct {
		name string
		addr func(t *testing.T) (addr string, inFlight, gaveUp <-chan struct{})
	}{
		{"connection refused", func(t *testing.T) (string, <-chan struct{}, <-chan struct{}) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := l.Addr().String()
			_ = l.Close()
			return addr, nil, nil
		}},
		{"redis hangs", func(t *testing.T) (string, <-chan struct{}, <-chan struct{}) {
			b := startBlackhole(t)
			return b.addr, b.got, b.closed
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			addr, inFlight, gaveUp := tc.addr(t)
			tr, m := newSharedTracker(t, addr, timeoutMS)
			pods := []tokenload.PodKey{"ns/d0", "ns/d1"}
			tr.Atomically(func(tx tokenload.Tx) { tx.Decode(pods[0], nil) }) // a pod to read: the sync has work
			syncDone := make(chan time.Duration)
			go func() {
				start := time.Now()
				tr.shared.sync(context.Background())
				syncDone <- time.Since(start)
			}()
			if inFlight != nil {
				select {
				case <-inFlight:
				case <-time.After(10 * time.Second):
					t.Fatal("the sync never reached the hanging Redis")
				}
			}
			for i := range 200 {
				id := fmt.Sprintf("req-%d", i)
				tr.Atomically(func(tx tokenload.Tx) {
					best := pods[0]
					if tx.Decode(pods[1], nil) < tx.Decode(pods[0], nil) {
						best = pods[1]
					}
					tx.ChargeDecode(tokenload.DecodeCharge{RequestID: id, Pod: best, Tokens: 10, TTL: time.Hour})
				})
				tr.ReleaseAll(id)
			}
			if gaveUp != nil {
				select {
				case <-gaveUp:
					t.Fatal("the sync gave up on Redis before 200 requests were scheduled and released: the request path waited for it")
				default:
				}
			}
			select {
			case took := <-syncDone:
				if limit := 5 * time.Duration(timeoutMS) * time.Millisecond; took > limit {
					t.Fatalf("sync took %v, want it bounded by its %d ms timeout (limit %v)", took, timeoutMS, limit)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("sync never returned")
			}
			if !tr.Snapshot().SharedDegraded || testutil.ToFloat64(m.sharedDegraded) != 1 {
				t.Fatal("the replica does not say it is degraded")
			}
			if s := tr.Snapshot(); s.OpenRequests != 0 || s.Pods["ns/d0"].DecodeCharges != 0 || s.Pods["ns/d1"].DecodeCharges != 0 {
				t.Fatalf("local ledger not back to zero: %+v", s)
			}
		})
	}
}
