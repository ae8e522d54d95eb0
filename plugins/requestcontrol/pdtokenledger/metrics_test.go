package pdtokenledger

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestMetricsReuseRegistered(t *testing.T) {
	reg := prometheus.NewRegistry()
	m1, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := NewMetrics(reg)
	if err != nil {
		t.Fatalf("second registration: %v", err)
	}
	if m1.active != m2.active || m1.sessionsFull != m2.sessionsFull {
		t.Fatal("second NewMetrics did not reuse the registered collectors")
	}
}

func TestGaugesFollowLedger(t *testing.T) {
	tr, _, m := newTestTracker(t, nil)
	chargeBoth(tr, "r1", "ns/p", "ns/d", 100, 40)
	chargeBoth(tr, "r2", "ns/p2", "ns/d", 100, 60)
	cases := []struct {
		name string
		vec  *prometheus.GaugeVec
		pod  []string
		want float64
	}{
		{"active", m.active, []string{"ns", "p"}, 100},
		{"kv", m.kv, []string{"ns", "p"}, 100},
		{"decode", m.decode, []string{"ns", "d"}, 100},
		{"decode slots", m.decodeSlots, []string{"ns", "d"}, 2},
	}
	for _, tc := range cases {
		if got := testutil.ToFloat64(tc.vec.WithLabelValues(tc.pod...)); got != tc.want {
			t.Fatalf("%s gauge = %v, want %v", tc.name, got, tc.want)
		}
	}
	tr.ReleasePrefillActive("r1")
	if got := testutil.ToFloat64(m.active.WithLabelValues("ns", "p")); got != 0 {
		t.Fatalf("active after release = %v", got)
	}
	if got := testutil.ToFloat64(m.kv.WithLabelValues("ns", "p")); got != 100 {
		t.Fatalf("kv after active release = %v", got)
	}
	// Decode slots and their KV tokens are leases held to the end of the stream.
	tr.ReleaseAll("r2")
	if got, slots := testutil.ToFloat64(m.decode.WithLabelValues("ns", "d")), testutil.ToFloat64(m.decodeSlots.WithLabelValues("ns", "d")); got != 40 || slots != 1 {
		t.Fatalf("decode after one end of stream = %v tokens, %v slots; want 40, 1", got, slots)
	}
}

// With aibrixMetricNames the per-pod gauges also appear under AIBrix's pd_token_load_* names,
// set and deleted together with pdgate's.
func TestAIBrixMetricNames(t *testing.T) {
	for _, enable := range []bool{false, true} {
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		if enable {
			m.EnableAIBrixNames(reg)
			m.EnableAIBrixNames(reg) // idempotent
		}
		a, kv, d := m.podGauges("ns/p")
		a.Set(3)
		kv.Set(4)
		d.Set(5)
		got := map[string]float64{}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			for _, mm := range mf.GetMetric() {
				got[mf.GetName()] = mm.GetGauge().GetValue()
			}
		}
		for i, name := range AIBrixGaugeNames {
			v, ok := got[name]
			if ok != enable || (enable && v != float64(i+3)) {
				t.Fatalf("enable=%v: %s = %v (present %v)", enable, name, v, ok)
			}
		}
		if got["pdgate_token_load_active_tokens"] != 3 {
			t.Fatalf("pdgate's gauge lost: %v", got)
		}
		m.deletePod("ns/p")
		mfs, _ = reg.Gather()
		for _, mf := range mfs {
			if len(mf.GetMetric()) > 0 && (mf.GetName() == AIBrixGaugeNames[0] || mf.GetName() == "pdgate_token_load_active_tokens") {
				t.Fatalf("%s not deleted with the pod", mf.GetName())
			}
		}
	}
}
