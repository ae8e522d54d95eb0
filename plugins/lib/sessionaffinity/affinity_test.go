package sessionaffinity

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func sessionConfig(t *testing.T, raw string) Config {
	t.Helper()
	c, err := ParseParameters("t", "t", []byte(raw), Options{LoadAllowance: true})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSweep: bindings idle past the TTL are evicted by Sweep (injected clock, no sleeps),
// counted, and the table-size gauge follows; stale per-request notes go too.
func TestSweep(t *testing.T) {
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(5000, 0)
	a := New("p/t", sessionConfig(t, `{"strategy":"session_id","sessionIdConfig":{"evictionTtlSeconds":30}}`), m, logr.Discard(), func() time.Time { return now })
	ep := eptest.Scheduling(eptest.Spec{Name: "a", Namespace: "ns"})
	res := &fwksched.SchedulingResult{PrimaryProfileName: "d", ProfileResults: map[string]*fwksched.ProfileRunResult{"d": {TargetEndpoints: []fwksched.Endpoint{ep}}}}
	for _, s := range []string{"s1", "s2"} {
		req := &fwksched.LLMRequest{RequestId: s, Headers: map[string]string{"x-session-id": s}}
		a.Lookup(req, []fwksched.Endpoint{ep}, true)
		a.PreRequest(context.Background(), req, res)
		now = now.Add(20 * time.Second)
	}
	// A scheduled request that never reached PreRequest leaves a note behind.
	a.Lookup(&fwksched.LLMRequest{RequestId: "orphan", Headers: map[string]string{"x-session-id": "s3"}}, []fwksched.Endpoint{ep}, true)
	steps := []struct {
		at        time.Time
		bindings  float64
		evictions float64
		notes     int
	}{
		{at: now, bindings: 1, evictions: 1, notes: 1},                       // s1 idle 40 s > 30 s; s2 idle 20 s
		{at: now.Add(11 * time.Second), bindings: 0, evictions: 2, notes: 1}, // s2 idle 31 s
		{at: now.Add(pendingTTL + time.Second), bindings: 0, evictions: 2, notes: 0},
	}
	for i, st := range steps {
		a.Sweep(st.at)
		if got := testutil.ToFloat64(m.bindings.WithLabelValues("p/t")); got != st.bindings {
			t.Errorf("step %d: bindings gauge %v, want %v", i, got, st.bindings)
		}
		if got := testutil.ToFloat64(m.evictions.WithLabelValues("p/t")); got != st.evictions {
			t.Errorf("step %d: evictions %v, want %v", i, got, st.evictions)
		}
		a.mu.Lock()
		notes := len(a.notes)
		a.mu.Unlock()
		if notes != st.notes {
			t.Errorf("step %d: %d notes, want %d", i, notes, st.notes)
		}
	}
}

// TestSweeperStopsWithContext: the sweeper goroutine returns when its context ends.
func TestSweeperStopsWithContext(t *testing.T) {
	for _, raw := range []string{`{}`, `{"strategy":"session_id"}`} {
		m, _ := NewMetrics(nil)
		a := New("p/t", sessionConfig(t, raw), m, logr.Discard(), nil)
		ctx, cancel := context.WithCancel(context.Background())
		a.Start(ctx)
		cancel()
		<-a.Done() // the test binary's timeout bounds this wait
	}
}
