package pdtokenledger

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// testLease is one charge made age before the reconciliation: a decode charge, an encode
// lease, or a prefill charge whose active part is still open unless legReturned.
type testLease struct {
	id              string
	pod             tokenload.PodKey
	prefill, encode bool
	legReturned     bool
	age             time.Duration
}

// chargeLeases charges each lease at now − age (oldest first) and leaves the clock at now.
func chargeLeases(tr *Tracker, c *fakeClock, leases []testLease) {
	sorted := slices.Clone(leases)
	slices.SortStableFunc(sorted, func(a, b testLease) int { return int(b.age - a.age) })
	start := c.Now()
	oldest := time.Duration(0)
	if len(sorted) > 0 {
		oldest = sorted[0].age
	}
	for _, l := range sorted {
		c.now = start.Add(oldest - l.age)
		if l.encode {
			tr.ChargeEncode(l.id, []tokenload.PodKey{l.pod}, time.Hour)
			continue
		}
		tr.Atomically(func(tx tokenload.Tx) {
			if l.prefill {
				tx.ChargePrefill(tokenload.PrefillCharge{RequestID: l.id, Pod: l.pod, Tokens: 100, TTL: time.Hour})
			} else {
				tx.ChargeDecode(tokenload.DecodeCharge{RequestID: l.id, Pod: l.pod, Tokens: 40, TTL: time.Hour})
			}
		})
		if l.legReturned {
			tr.ReleasePrefillActive(l.id)
		}
	}
	c.now = start.Add(oldest)
}

// openLeases lists the requests whose in-flight lease (active prefill part or decode charge)
// is still open.
func openLeases(tr *Tracker) []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var ids []string
	for id, e := range tr.reqs {
		if (e.prefill != nil && e.prefill.active) || (e.decode != nil && e.decode.open) || (e.encode != nil && e.encode.open) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func TestReconcile(t *testing.T) {
	const p0, d0, d1, e0 = tokenload.PodKey("ns/p0"), tokenload.PodKey("ns/d0"), tokenload.PodKey("ns/d1"), tokenload.PodKey("ns/e0")
	old, older, oldest, young := 100*time.Second, 200*time.Second, 300*time.Second, 30*time.Second
	cases := []struct {
		name         string
		graceSeconds int
		leases       []testLease
		counts       []PodInFlight
		wantReleased int
		wantOpen     []string
		wantKV       float64 // prefill KV left on p0: never reconciled, the engine no longer counts it
	}{
		{"off by default", 0, []testLease{{id: "a", pod: d0, age: oldest}},
			[]PodInFlight{{d0, 0}}, 0, []string{"a"}, 0},
		{"explained by the pod's count", 60, []testLease{{id: "a", pod: d0, age: oldest}, {id: "b", pod: d0, age: old}},
			[]PodInFlight{{d0, 2}}, 0, []string{"a", "b"}, 0},
		{"the oldest of the excess go", 60, []testLease{{id: "a", pod: d0, age: oldest}, {id: "b", pod: d0, age: older}, {id: "c", pod: d0, age: old}},
			[]PodInFlight{{d0, 1}}, 2, []string{"c"}, 0},
		{"young leases are not yet on the engine", 60, []testLease{{id: "a", pod: d0, age: young}, {id: "b", pod: d0, age: young}},
			[]PodInFlight{{d0, 0}}, 0, []string{"a", "b"}, 0},
		{"only leases past the grace", 60, []testLease{{id: "a", pod: d0, age: oldest}, {id: "b", pod: d0, age: young}},
			[]PodInFlight{{d0, 0}}, 1, []string{"b"}, 0},
		{"prefill active part released, its KV kept", 60, []testLease{{id: "p", pod: p0, prefill: true, age: oldest}},
			[]PodInFlight{{p0, 0}}, 1, nil, 100},
		{"a returned prefill leg holds only KV", 60, []testLease{{id: "p", pod: p0, prefill: true, legReturned: true, age: oldest}},
			[]PodInFlight{{p0, 0}}, 0, nil, 100},
		{"pods without a count are left alone", 60, []testLease{{id: "a", pod: d0, age: oldest}, {id: "b", pod: d1, age: oldest}},
			[]PodInFlight{{d1, 0}}, 1, []string{"a"}, 0},
		{"a negative count counts as none", 60, []testLease{{id: "a", pod: d0, age: oldest}},
			[]PodInFlight{{d0, -3}}, 1, nil, 0},
		{"a pod the ledger does not know", 60, nil, []PodInFlight{{d0, 0}}, 0, nil, 0},
		{"encode leases the encoder cannot explain", 60, []testLease{{id: "x", pod: e0, encode: true, age: oldest}, {id: "y", pod: e0, encode: true, age: old}},
			[]PodInFlight{{e0, 1}}, 1, []string{"y"}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, c, m := newTestTracker(t, func(p *Params) { p.ReconcileGraceSeconds = tc.graceSeconds })
			chargeLeases(tr, c, tc.leases)
			if got := tr.Reconcile(tc.counts); got != tc.wantReleased {
				t.Errorf("released %d, want %d", got, tc.wantReleased)
			}
			if got := openLeases(tr); !slices.Equal(got, tc.wantOpen) {
				t.Errorf("open leases %v, want %v", got, tc.wantOpen)
			}
			if got := prefillOf(tr, p0).KVTokens; got != tc.wantKV {
				t.Errorf("prefill KV on %s = %v, want %v", p0, got, tc.wantKV)
			}
			counted := testutil.ToFloat64(m.forceReleased.WithLabelValues("prefill", "reconciled")) +
				testutil.ToFloat64(m.forceReleased.WithLabelValues("decode", "reconciled")) +
				testutil.ToFloat64(m.forceReleased.WithLabelValues("encode", "reconciled"))
			if counted != float64(tc.wantReleased) {
				t.Errorf("force_released{reason=reconciled} = %v, want %v", counted, tc.wantReleased)
			}
		})
	}
}

// AdmitRequest admits everything and reconciles with the candidates' fresh scrapes, at most
// once a second.
func TestAdmitRequestReconciles(t *testing.T) {
	const d0 = tokenload.PodKey("ns/d0")
	cases := []struct {
		name        string
		grace       int
		scrapedAgo  time.Duration
		noScrape    bool
		lastRunAgo  time.Duration // 0: never ran
		wantRelease bool
	}{
		{"fresh scrape", 60, time.Second, false, 0, true},
		{"off", 0, time.Second, false, 0, false},
		{"stale scrape", 60, time.Minute, false, 0, false},
		{"never scraped", 60, 0, true, 0, false},
		{"ran within the last second", 60, time.Second, false, 500 * time.Millisecond, false},
		{"ran a second ago", 60, time.Second, false, time.Second, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, c, _ := newTestTracker(t, func(p *Params) { p.ReconcileGraceSeconds = tc.grace })
			chargeLeases(tr, c, []testLease{{id: "a", pod: d0, age: 5 * time.Minute}})
			pl := New("ledger", tr)
			if tc.lastRunAgo > 0 {
				pl.reconciled = c.Now().Add(-tc.lastRunAgo)
			}
			m := fwkdl.NewMetrics()
			if !tc.noScrape {
				m.UpdateTime = c.Now().Add(-tc.scrapedAgo)
			}
			ep := eptest.Scheduling(eptest.Spec{Namespace: "ns", Name: "d0-rank0", PodName: "d0", Metrics: m})
			if err := pl.AdmitRequest(context.Background(), &fwksched.LLMRequest{RequestId: "new"}, []fwksched.Endpoint{ep}); err != nil {
				t.Fatalf("AdmitRequest refused a request: %v", err)
			}
			if released := len(openLeases(tr)) == 0; released != tc.wantRelease {
				t.Fatalf("lease released = %v, want %v", released, tc.wantRelease)
			}
		})
	}
}
