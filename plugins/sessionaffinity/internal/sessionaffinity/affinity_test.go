package sessionaffinity

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
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

// agent is an attribute value a request-level producer would write on every candidate.
type agent string

func (a agent) Clone() fwkdl.Cloneable { return a }
func (a agent) String() string         { return string(a) }

// TestSession: the first non-empty (trimmed) source wins; headers match in any case; attribute
// sources read the candidates' attributes under "<attribute>/<producer>".
func TestSession(t *testing.T) {
	withAttr := func(key string, v fwkdl.Cloneable) fwksched.Endpoint {
		return eptest.Scheduling(eptest.Spec{Name: "a", Namespace: "ns", Attributes: map[string]fwkdl.Cloneable{key: v}})
	}
	plain := eptest.Scheduling(eptest.Spec{Name: "b", Namespace: "ns"})
	const twoSources = `{"strategy":"session_id","sessionIdConfig":{"sources":[{"header":"X-Session-Id"},{"attribute":"agent-identity","producer":"agent"}]}}`
	tests := []struct {
		name    string
		params  string
		headers map[string]string
		eps     []fwksched.Endpoint
		want    string
	}{
		{name: "default source", params: `{"strategy":"session_id"}`, headers: map[string]string{"x-session-id": "s1"}, want: "s1"},
		{name: "header case and spaces", params: `{"strategy":"session_id"}`, headers: map[string]string{"X-SESSION-ID": "  s1 "}, want: "s1"},
		{name: "blank header falls through to the attribute", params: twoSources, headers: map[string]string{"x-session-id": " "},
			eps: []fwksched.Endpoint{plain, withAttr("agent-identity/agent", agent("bot-7"))}, want: "bot-7"},
		{name: "header first", params: twoSources, headers: map[string]string{"x-session-id": "s1"},
			eps: []fwksched.Endpoint{withAttr("agent-identity/agent", agent("bot-7"))}, want: "s1"},
		{name: "attribute under another producer is not read", params: twoSources,
			eps: []fwksched.Endpoint{withAttr("agent-identity/other", agent("bot-7"))}, want: ""},
		{name: "AIBrix key as the second header", params: `{"strategy":"session_id","sessionIdConfig":{"sources":[{"header":"x-session-id"},{"header":"x-aibrix-session-key"}]}}`,
			headers: map[string]string{"X-Aibrix-Session-Key": "k"}, want: "k"},
		{name: "encoded strategy reads its header", params: `{"encodedEndpointHeaderConfig":{"header":"x-tok"}}`,
			headers: map[string]string{"X-Tok": "abc", "x-session-id": "s1"}, want: "abc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := NewMetrics(nil)
			a := New("p/t", sessionConfig(t, tt.params), m, logr.Discard(), nil)
			if got := a.Session(&fwksched.LLMRequest{Headers: tt.headers}, tt.eps); got != tt.want {
				t.Fatalf("session %q, want %q", got, tt.want)
			}
		})
	}
}
