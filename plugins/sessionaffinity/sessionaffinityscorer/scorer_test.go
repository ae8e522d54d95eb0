package sessionaffinityscorer

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	sa "github.com/pdgate/pdgate/plugins/sessionaffinity/internal/sessionaffinity"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// pod is a candidate "ns/<name>" whose load is waiting+running (-1: no metrics).
func pod(name string, waiting, running int) fwksched.Endpoint {
	if waiting < 0 {
		return eptest.Scheduling(eptest.Spec{Name: name, Namespace: "ns", NoMetrics: true})
	}
	return eptest.Scheduling(eptest.Spec{Name: name, Namespace: "ns",
		Metrics: &fwkdl.Metrics{WaitingQueueSize: waiting, RunningRequestsSize: running}})
}

// step is one request of a session: its headers, the candidates (name -> waiting queue;
// running requests are waiting/2, so both fields count), the decode and prefill picks the
// other scorers made, and what the affinity must have said.
type step struct {
	after     time.Duration // clock advance before the request
	headers   map[string]string
	cands     map[string]int
	want      string // the candidate scored 1 ("" = everyone 0)
	decode    string // primary (decode) pick
	prefill   string // prefill pick ("" = no prefill profile ran)
	wantBound string // session_id: the binding after PreRequest ("-" = not checked)
	wantResp  string // encoded: endpoint name in the response header ("" = no header)
}

func candidates(m map[string]int) []fwksched.Endpoint {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	eps := make([]fwksched.Endpoint, 0, len(m))
	for _, n := range names {
		eps = append(eps, pod(n, m[n]-m[n]/2, m[n]/2))
	}
	return eps
}

func result(eps []fwksched.Endpoint, decode, prefill string) *fwksched.SchedulingResult {
	find := func(n string) fwksched.Endpoint {
		for _, ep := range eps {
			if ep.GetMetadata().NamespacedName.Name == n {
				return ep
			}
		}
		return pod(n, 0, 0) // a pick outside these candidates (another profile's pool)
	}
	r := &fwksched.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*fwksched.ProfileRunResult{
		"decode": {TargetEndpoints: []fwksched.Endpoint{find(decode)}}}}
	if prefill != "" {
		r.ProfileResults["prefill"] = &fwksched.ProfileRunResult{TargetEndpoints: []fwksched.Endpoint{pod(prefill, 0, 0)}}
	}
	return r
}

// metric reads one series from reg (0 when absent).
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

func session(id string) map[string]string { return map[string]string{"x-session-id": id} }
func token(name string) map[string]string {
	return map[string]string{"x-session-token": sa.EncodeEndpoint("ns/" + name)}
}

func TestScorer(t *testing.T) {
	const sid = `{"strategy":"session_id"}`
	tests := []struct {
		name    string
		params  string
		steps   []step
		metrics map[string]float64 // "name{k=v}" -> value, plugin label implied
	}{
		{name: "session_id: a new session binds the decode pick, never the prefill one", params: sid, steps: []step{
			{headers: session("s1"), cands: map[string]int{"a": 0, "b": 0}, want: "", decode: "b", prefill: "p", wantBound: "b"},
			{headers: session("s1"), cands: map[string]int{"a": 0, "b": 0}, want: "b", decode: "b", prefill: "p", wantBound: "b"},
		}, metrics: map[string]float64{"pdgate_session_affinity_misses_total{reason=unbound}": 1, "pdgate_session_affinity_hits_total": 1, "pdgate_session_affinity_bindings": 1}},
		{name: "session_id: header name is case-insensitive", params: `{"strategy":"session_id","sessionIdConfig":{"sources":[{"header":"X-Session-ID"}]}}`, steps: []step{
			{headers: map[string]string{"X-SESSION-ID": "s1"}, cands: map[string]int{"a": 0, "b": 0}, decode: "a", wantBound: "a"},
			{headers: map[string]string{"x-session-id": " s1 "}, cands: map[string]int{"a": 0, "b": 0}, want: "a", decode: "a", wantBound: "a"},
		}},
		{name: "session_id: AIBrix's session key as a source", params: `{"strategy":"session_id","sessionIdConfig":{"sources":[{"header":"x-session-id"},{"header":"x-aibrix-session-key"}]}}`, steps: []step{
			{headers: map[string]string{"x-aibrix-session-key": "k"}, cands: map[string]int{"a": 0, "b": 0}, decode: "b", wantBound: "b"},
			{headers: map[string]string{"X-Aibrix-Session-Key": "k"}, cands: map[string]int{"a": 0, "b": 0}, want: "b", decode: "b", wantBound: "b"},
		}},
		{name: "session_id: no session, no preference, nothing bound", params: sid, steps: []step{
			{headers: map[string]string{"x-session-id": "  "}, cands: map[string]int{"a": 0}, decode: "a", wantBound: ""},
		}, metrics: map[string]float64{"pdgate_session_affinity_misses_total{reason=unbound}": 0, "pdgate_session_affinity_bindings": 0}},
		{name: "session_id: the bound pod leaves the pool, the new pick is bound", params: sid, steps: []step{
			{headers: session("s1"), cands: map[string]int{"a": 0, "b": 0}, decode: "a", wantBound: "a"},
			{headers: session("s1"), cands: map[string]int{"b": 0, "c": 0}, want: "", decode: "c", wantBound: "c"},
			{headers: session("s1"), cands: map[string]int{"a": 0, "b": 0, "c": 0}, want: "c", decode: "c", wantBound: "c"},
		}, metrics: map[string]float64{"pdgate_session_affinity_misses_total{reason=absent}": 1, "pdgate_session_affinity_rebinds_total{reason=absent}": 1}},
		{name: "session_id: present but outscored keeps the binding (llm-d)", params: sid, steps: []step{
			{headers: session("s1"), cands: map[string]int{"a": 0, "b": 0}, decode: "a", wantBound: "a"},
			{headers: session("s1"), cands: map[string]int{"a": 0, "b": 0}, want: "a", decode: "b", wantBound: "a"},
		}, metrics: map[string]float64{"pdgate_session_affinity_rebinds_total{reason=absent}": 0}},
		{name: "session_id: no load check by default", params: sid, steps: []step{
			{headers: session("s1"), cands: map[string]int{"a": 0, "b": 0}, decode: "a", wantBound: "a"},
			{headers: session("s1"), cands: map[string]int{"a": 100, "b": 0}, want: "a", decode: "a", wantBound: "a"},
		}},
		{name: "session_id: over the load allowance the affinity drops and the session migrates", params: `{"strategy":"session_id","loadAllowance":2}`, steps: []step{
			{headers: session("s1"), cands: map[string]int{"a": 0, "b": 0}, decode: "a", wantBound: "a"},
			{headers: session("s1"), cands: map[string]int{"a": 3, "b": 1}, want: "a", decode: "a", wantBound: "a"}, // 2 over: within
			{headers: session("s1"), cands: map[string]int{"a": 4, "b": 1, "c": 9}, want: "", decode: "b", wantBound: "b"},
			{headers: session("s1"), cands: map[string]int{"a": 0, "b": 2}, want: "b", decode: "b", wantBound: "b"},
		}, metrics: map[string]float64{"pdgate_session_affinity_misses_total{reason=overloaded}": 1, "pdgate_session_affinity_rebinds_total{reason=overloaded}": 1, "pdgate_session_affinity_hits_total": 2}},
		{name: "session_id: unknown load is never overloaded", params: `{"strategy":"session_id","loadAllowance":0}`, steps: []step{
			{headers: session("s1"), cands: map[string]int{"a": 0}, decode: "a", wantBound: "a"},
			{headers: session("s1"), cands: map[string]int{"a": -1, "b": 0}, want: "a", decode: "a", wantBound: "a"},
		}},
		{name: "session_id: idle past the TTL means unbound", params: `{"strategy":"session_id","sessionIdConfig":{"evictionTtlSeconds":60}}`, steps: []step{
			{headers: session("s1"), cands: map[string]int{"a": 0, "b": 0}, decode: "a", wantBound: "a"},
			{after: 60 * time.Second, headers: session("s1"), cands: map[string]int{"a": 0, "b": 0}, want: "a", decode: "a", wantBound: "a"},
			{after: 61 * time.Second, headers: session("s1"), cands: map[string]int{"a": 0, "b": 0}, want: "", decode: "b", wantBound: "b"},
		}, metrics: map[string]float64{"pdgate_session_affinity_misses_total{reason=unbound}": 2, "pdgate_session_affinity_rebinds_total{reason=absent}": 0}},
		{name: "session_id: a full table refuses new sessions", params: `{"strategy":"session_id","sessionIdConfig":{"maxSessions":1}}`, steps: []step{
			{headers: session("s1"), cands: map[string]int{"a": 0}, decode: "a", wantBound: "a"},
			{headers: session("s2"), cands: map[string]int{"a": 0}, decode: "a", wantBound: ""},
		}, metrics: map[string]float64{"pdgate_session_affinity_bindings_refused_total": 1, "pdgate_session_affinity_bindings": 1}},
		{name: "session_id: profileName pins the prefill pick", params: `{"strategy":"session_id","profileName":"prefill"}`, steps: []step{
			{headers: session("s1"), cands: map[string]int{"p1": 0, "p2": 0}, decode: "d", prefill: "p2", wantBound: "p2"},
			{headers: session("s1"), cands: map[string]int{"p1": 0, "p2": 0}, want: "p2", decode: "d", prefill: "p2", wantBound: "p2"},
		}},
		{name: "encoded: first response carries the served endpoint", steps: []step{
			{headers: nil, cands: map[string]int{"a": 0, "b": 0}, want: "", decode: "b", prefill: "p", wantResp: "b"},
			{headers: token("b"), cands: map[string]int{"a": 0, "b": 0}, want: "b", decode: "b", prefill: "p", wantResp: "b"},
		}, metrics: map[string]float64{"pdgate_session_affinity_hits_total": 1}},
		{name: "encoded: endpoint gone, others decide, response carries the new one", steps: []step{
			{headers: token("a"), cands: map[string]int{"b": 0, "c": 0}, want: "", decode: "c", wantResp: "c"},
		}, metrics: map[string]float64{"pdgate_session_affinity_misses_total{reason=absent}": 1, "pdgate_session_affinity_rebinds_total{reason=absent}": 1}},
		{name: "encoded: undecodable token fails open", steps: []step{
			{headers: map[string]string{"x-session-token": "%%%"}, cands: map[string]int{"a": 0}, want: "", decode: "a", wantResp: "a"},
		}, metrics: map[string]float64{"pdgate_session_affinity_misses_total{reason=invalid}": 1}},
		{name: "encoded: custom header, any case", params: `{"encodedEndpointHeaderConfig":{"header":"X-Route-Token"}}`, steps: []step{
			{headers: map[string]string{"X-ROUTE-TOKEN": sa.EncodeEndpoint("ns/a")}, cands: map[string]int{"a": 0, "b": 0}, want: "a", decode: "a", wantResp: "a"},
		}},
		{name: "encoded: load allowance", params: `{"loadAllowance":1}`, steps: []step{
			{headers: token("a"), cands: map[string]int{"a": 4, "b": 2}, want: "", decode: "b", wantResp: "b"},
		}, metrics: map[string]float64{"pdgate_session_affinity_rebinds_total{reason=overloaded}": 1}},
		{name: "encoded: profileName's pick goes back; echoed when that profile did not run", params: `{"profileName":"prefill"}`, steps: []step{
			{headers: nil, cands: map[string]int{"d": 0}, decode: "d", prefill: "p1", wantResp: "p1"},
			{headers: token("p1"), cands: map[string]int{"d": 0}, decode: "d", wantResp: "p1"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseParameters("sa", json.RawMessage(tt.params))
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			m, err := sa.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Unix(1_000_000, 0)
			s := New("sa", c, m, func() time.Time { return now })
			ctx := context.Background()
			for i, st := range tt.steps {
				now = now.Add(st.after)
				req := &fwksched.LLMRequest{RequestId: "r" + string(rune('0'+i)), Headers: st.headers}
				eps := candidates(st.cands)
				scores := s.Score(ctx, fwksched.NewCycleState(), req, eps)
				for _, ep := range eps {
					want := 0.0
					if ep.GetMetadata().NamespacedName.Name == st.want {
						want = 1
					}
					if scores[ep] != want {
						t.Fatalf("step %d: score of %s = %v, want %v (all: %v)", i, ep.GetMetadata().NamespacedName, scores[ep], want, scores)
					}
				}
				res := result(eps, st.decode, st.prefill)
				s.PreRequest(ctx, req, res)
				resp := &fwkrc.Response{RequestId: req.RequestId, Headers: map[string]string{}}
				s.ResponseHeader(ctx, req, resp, res.ProfileResults["decode"].TargetEndpoints[0].GetMetadata())
				if tb := s.Affinity().Table(); tb != nil {
					got, _ := tb.Get(strings.TrimSpace(s.Affinity().Session(req, eps)), now)
					if st.wantBound != "-" && got != nsName(st.wantBound) {
						t.Fatalf("step %d: bound to %q, want %q", i, got, nsName(st.wantBound))
					}
					if len(resp.Headers) != 0 {
						t.Fatalf("step %d: session_id wrote response headers %v", i, resp.Headers)
					}
				} else if got, want := resp.Headers["x-session-token"]+resp.Headers["x-route-token"], enc(st.wantResp); got != want {
					t.Fatalf("step %d: response token %q, want %q", i, got, want)
				}
			}
			for k, want := range tt.metrics {
				name, labels := k, []string{"plugin", "sa/" + Type}
				if i := strings.IndexByte(k, '{'); i > 0 {
					name = k[:i]
					kv := strings.SplitN(strings.Trim(k[i:], "{}"), "=", 2)
					labels = append(labels, kv[0], kv[1])
				}
				if got := metric(t, reg, name, labels...); got != want {
					t.Errorf("%s = %v, want %v", k, got, want)
				}
			}
		})
	}
}

func nsName(n string) string {
	if n == "" {
		return ""
	}
	return "ns/" + n
}

func enc(n string) string {
	if n == "" {
		return ""
	}
	return sa.EncodeEndpoint("ns/" + n)
}

// TestFactory: errors name the scorer and the field; metrics go to the handle's registerer;
// the sweeper lives as long as the handle's context.
func TestFactory(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		wantErr string
	}{
		{name: "defaults", raw: ``},
		{name: "session_id with allowance", raw: `{"strategy":"session_id","loadAllowance":4}`},
		{name: "unknown strategy", raw: `{"strategy":"least_loaded"}`, wantErr: `session-affinity-scorer "probe": parameter strategy="least_loaded"`},
		{name: "pre-merge key", raw: `{"strategy":"session_id","sessionIdConfig":{"missThreshold":3}}`, wantErr: `session-affinity-scorer "probe"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			ctx, cancel := context.WithCancel(pluginkit.WithRegisterer(context.Background(), reg))
			defer cancel()
			h := plugintest.Handle(ctx)
			p, err := Factory("probe", json.RawMessage(tt.raw), h)
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			s := p.(*Scorer)
			if s.Category() != fwksched.Affinity {
				t.Fatalf("category %v", s.Category())
			}
			s.Score(ctx, fwksched.NewCycleState(), &fwksched.LLMRequest{Headers: map[string]string{"x-session-id": "s", "x-session-token": "x"}}, []fwksched.Endpoint{pod("a", 0, 0)})
			if metric(t, reg, "pdgate_session_affinity_misses_total", "plugin", "probe/"+Type) != 1 {
				t.Fatal("the miss was not counted on the handle's registerer")
			}
			cancel()
			<-s.Affinity().Done()
		})
	}
}
