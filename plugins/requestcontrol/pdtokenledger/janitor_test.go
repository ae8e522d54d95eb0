package pdtokenledger

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

func TestJanitor(t *testing.T) {
	const p, d = tokenload.PodKey("ns/p"), tokenload.PodKey("ns/d")
	cases := []struct {
		name        string
		params      func(*Params)
		setup       func(tr *Tracker)
		advance     time.Duration
		want        SweepResult
		wantOpen    int
		wantActive  float64
		wantKV      float64
		wantDecode  float64
		wantPrefill bool // prefill pod still tracked
	}{
		{
			name: "charges within TTL stay",
			setup: func(tr *Tracker) {
				chargeBoth(tr, "r1", p, d, 100, 50)
				tr.Confirm("r1")
			},
			advance: time.Hour, wantOpen: 1, wantActive: 100, wantKV: 100, wantDecode: 50, wantPrefill: true,
		},
		{
			name: "charges older than TTL are force-released",
			setup: func(tr *Tracker) {
				chargeBoth(tr, "r1", p, d, 100, 50)
				tr.Confirm("r1")
			},
			advance: time.Hour + time.Second, want: SweepResult{ForceReleased: 2}, wantPrefill: true,
		},
		{
			name: "TTL 0 is never force-released",
			setup: func(tr *Tracker) {
				tr.Atomically(func(tx tokenload.Tx) { tx.ChargePrefill(tokenload.PrefillCharge{RequestID: "r1", Pod: p, Tokens: 10}) })
				tr.Confirm("r1")
			},
			advance: 100 * time.Hour, wantOpen: 1, wantActive: 10, wantKV: 10, wantPrefill: true,
		},
		{
			name: "only the kv part left is force-released",
			setup: func(tr *Tracker) {
				chargeBoth(tr, "r1", p, d, 100, 50)
				tr.Confirm("r1")
				tr.ReleasePrefillActive("r1")
			},
			advance: 2 * time.Hour, want: SweepResult{ForceReleased: 2}, wantPrefill: true,
		},
		{
			name:    "unconfirmed requests are released after the timeout",
			params:  func(p *Params) { p.UnconfirmedTimeoutSeconds = 30 },
			setup:   func(tr *Tracker) { chargeBoth(tr, "r1", p, d, 100, 50) },
			advance: 31 * time.Second, want: SweepResult{Unconfirmed: 1}, wantPrefill: true,
		},
		{
			name:    "unconfirmed sweep disabled with 0",
			params:  func(p *Params) { p.UnconfirmedTimeoutSeconds = 0 },
			setup:   func(tr *Tracker) { chargeBoth(tr, "r1", p, d, 100, 50) },
			advance: 10 * time.Minute, wantOpen: 1, wantActive: 100, wantKV: 100, wantDecode: 50, wantPrefill: true,
		},
		{
			name: "idle sessions are forgotten",
			setup: func(tr *Tracker) {
				tr.NewTokens("m", "s1", 100, -1)
				tr.NewTokens("m", "s2", 100, -1)
			},
			advance: 1801 * time.Second, want: SweepResult{SessionsExpired: 2},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk, _ := newTestTracker(t, func(pp *Params) {
				pp.DecodeOutputGrowth = false
				if tc.params != nil {
					tc.params(pp)
				}
			})
			tc.setup(tr)
			clk.Advance(tc.advance)
			if got := tr.Sweep(); got != tc.want {
				t.Fatalf("sweep = %+v, want %+v", got, tc.want)
			}
			s := tr.Snapshot()
			if s.OpenRequests != tc.wantOpen {
				t.Fatalf("open requests = %d, want %d", s.OpenRequests, tc.wantOpen)
			}
			if _, ok := s.Pods[p]; ok != tc.wantPrefill {
				t.Fatalf("prefill pod tracked = %v, want %v", ok, tc.wantPrefill)
			}
			ps := s.Pods[p]
			if ps.ActiveTokens != tc.wantActive || ps.KVTokens != tc.wantKV || s.Pods[d].DecodeTokens != tc.wantDecode {
				t.Fatalf("active=%v kv=%v decode=%v, want %v %v %v", ps.ActiveTokens, ps.KVTokens, s.Pods[d].DecodeTokens,
					tc.wantActive, tc.wantKV, tc.wantDecode)
			}
			if s.Sessions != 0 && tc.want.SessionsExpired > 0 {
				t.Fatalf("sessions left: %d", s.Sessions)
			}
		})
	}
}

func TestJanitorForceReleaseCounterAndPrune(t *testing.T) {
	tr, clk, m := newTestTracker(t, nil)
	chargeBoth(tr, "r1", "ns/p", "ns/d", 100, 50)
	tr.Confirm("r1")
	chargeBoth(tr, "r2", "ns/p2", "ns/d2", 1, 1)
	tr.Confirm("r2")
	tr.ReleaseAll("r2")
	if n := testutil.CollectAndCount(m.active); n != 4 { // p, d, p2, d2
		t.Fatalf("active series = %d, want 4", n)
	}
	clk.Advance(2 * time.Hour)
	r := tr.Sweep()
	if r.ForceReleased != 2 {
		t.Fatalf("force-released %d parts, want 2", r.ForceReleased)
	}
	if got := testutil.ToFloat64(m.forceReleased.WithLabelValues("prefill", "ttl")); got != 1 {
		t.Fatalf("force_released_total{prefill,ttl} = %v", got)
	}
	if got := testutil.ToFloat64(m.forceReleased.WithLabelValues("decode", "ttl")); got != 1 {
		t.Fatalf("force_released_total{decode,ttl} = %v", got)
	}
	// p2/d2 were idle and unwritten since the previous sweep (construction): pruned now.
	// p/d were written by the force release in this sweep: pruned by the next one.
	if r.PodsPruned != 2 {
		t.Fatalf("pruned %d pods, want 2", r.PodsPruned)
	}
	clk.Advance(time.Minute)
	if r := tr.Sweep(); r.PodsPruned != 2 {
		t.Fatalf("second sweep pruned %d pods, want 2", r.PodsPruned)
	}
	if n := testutil.CollectAndCount(m.active) + testutil.CollectAndCount(m.kv) + testutil.CollectAndCount(m.decode); n != 0 {
		t.Fatalf("%d gauge series left after pruning", n)
	}
	if s := tr.Snapshot(); len(s.Pods) != 0 {
		t.Fatalf("pods left: %v", s.Pods)
	}
	// A pruned pod comes back on its next charge.
	chargeBoth(tr, "r3", "ns/p", "ns/d", 5, 5)
	if got := prefillOf(tr, "ns/p"); got.ActiveTokens != 5 {
		t.Fatalf("recreated pod active = %v", got.ActiveTokens)
	}
}

// SetClock puts the ledger on another clock (bench sim's virtual one): TTLs are measured on it
// and the epoch restarts at its now.
func TestSetClock(t *testing.T) {
	m, err := NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := NewTracker(Options{Params: testParams(t), Metrics: m}) // wall clock
	c := newFakeClock()
	tr.SetClock(c)
	if !tr.epoch.Equal(c.Now()) || !tr.lastSweep.Equal(c.Now()) {
		t.Fatalf("epoch %v, last sweep %v; want the new clock's now %v", tr.epoch, tr.lastSweep, c.Now())
	}
	chargeBoth(tr, "r1", "ns/p", "ns/d", 100, 50)
	if r := tr.Sweep(); r.ForceReleased+r.Unconfirmed != 0 {
		t.Fatalf("fresh charges released: %+v", r)
	}
	c.Advance(2 * time.Hour) // past the charges' TTL and the confirmation timeout, on the new clock only
	if r := tr.Sweep(); r.ForceReleased+r.Unconfirmed == 0 {
		t.Fatalf("after 2 h on the set clock: %+v, want the request's charges released", r)
	}
}
