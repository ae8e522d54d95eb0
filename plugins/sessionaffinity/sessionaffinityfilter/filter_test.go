package sessionaffinityfilter

import (
	"context"
	"encoding/json"
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

func pod(name string, load int) fwksched.Endpoint {
	return eptest.Scheduling(eptest.Spec{Name: name, Namespace: "ns", Metrics: &fwkdl.Metrics{WaitingQueueSize: load}})
}

func pods(names string, load int) []fwksched.Endpoint {
	var eps []fwksched.Endpoint
	for _, n := range strings.Split(names, ",") {
		eps = append(eps, pod(n, load))
	}
	return eps
}

func TestFilter(t *testing.T) {
	type step struct {
		headers map[string]string
		cands   string
		load    int // every candidate's waiting queue
		want    string
		pick    string // decode pick
	}
	tok := func(n string) map[string]string {
		return map[string]string{"X-Session-Token": sa.EncodeEndpoint("ns/" + n)}
	}
	sid := func(id string) map[string]string { return map[string]string{"x-session-id": id} }
	tests := []struct {
		name   string
		params string
		steps  []step
	}{
		{name: "encoded: no token passes everyone", steps: []step{{cands: "a,b", want: "a,b", pick: "a"}}},
		{name: "encoded: token present keeps only it (any header case)", steps: []step{{headers: tok("b"), cands: "a,b,c", want: "b", pick: "b"}}},
		{name: "encoded: token absent fails open", steps: []step{{headers: tok("z"), cands: "a,b", want: "a,b", pick: "a"}}},
		{name: "encoded: garbage token fails open", steps: []step{{headers: map[string]string{"x-session-token": "??"}, cands: "a,b", want: "a,b", pick: "a"}}},
		{name: "session_id: unbound passes everyone, then keeps the bound pod", params: `{"strategy":"session_id"}`, steps: []step{
			{headers: sid("s"), cands: "a,b", want: "a,b", pick: "b"},
			{headers: sid("s"), cands: "a,b", want: "b", pick: "b"},
		}},
		{name: "session_id: hard affinity ignores load", params: `{"strategy":"session_id"}`, steps: []step{
			{headers: sid("s"), cands: "a,b", want: "a,b", pick: "a"},
			{headers: sid("s"), cands: "a,b", load: 1000, want: "a", pick: "a"},
		}},
		{name: "session_id: bound pod gone: fail open, rebind to the new pick", params: `{"strategy":"session_id"}`, steps: []step{
			{headers: sid("s"), cands: "a,b", want: "a,b", pick: "a"},
			{headers: sid("s"), cands: "b,c", want: "b,c", pick: "c"},
			{headers: sid("s"), cands: "a,b,c", want: "c", pick: "c"},
		}},
		{name: "session_id: AIBrix key", params: `{"strategy":"session_id","sessionIdConfig":{"sources":[{"header":"x-aibrix-session-key"}]}}`, steps: []step{
			{headers: map[string]string{"x-aibrix-session-key": "k"}, cands: "a,b", want: "a,b", pick: "b"},
			{headers: map[string]string{"X-AIBRIX-SESSION-KEY": "k"}, cands: "a,b", want: "b", pick: "b"},
			{headers: sid("k"), cands: "a,b", want: "a,b", pick: "a"}, // x-session-id is not a source here
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseParameters("f", json.RawMessage(tt.params))
			if err != nil {
				t.Fatal(err)
			}
			m, _ := sa.NewMetrics(nil)
			f := New("f", c, m, func() time.Time { return time.Unix(100, 0) })
			for i, st := range tt.steps {
				req := &fwksched.LLMRequest{RequestId: "r", Headers: st.headers}
				eps := pods(st.cands, st.load)
				if got := plugintest.Names(f.Filter(context.Background(), fwksched.NewCycleState(), req, eps)); got != st.want {
					t.Fatalf("step %d: kept %s, want %s", i, got, st.want)
				}
				picked := pod(st.pick, 0)
				f.PreRequest(context.Background(), req, &fwksched.SchedulingResult{PrimaryProfileName: "decode",
					ProfileResults: map[string]*fwksched.ProfileRunResult{"decode": {TargetEndpoints: []fwksched.Endpoint{picked}}}})
				resp := &fwkrc.Response{Headers: map[string]string{}}
				f.ResponseHeader(context.Background(), req, resp, picked.GetMetadata())
				want := ""
				if c.Strategy == sa.StrategyEncodedEndpointHeader {
					want = sa.EncodeEndpoint("ns/" + st.pick)
				}
				if got := resp.Headers["x-session-token"]; got != want {
					t.Fatalf("step %d: response token %q, want %q", i, got, want)
				}
			}
		})
	}
}

// TestFactory: parameters are validated with the filter's name, loadAllowance is refused, and
// the sweeper lives as long as the handle's context.
func TestFactory(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		wantErr string
	}{
		{name: "defaults", raw: ``},
		{name: "session_id", raw: `{"strategy":"session_id","sessionIdConfig":{"evictionTtlSeconds":5,"evictionSweepSeconds":1}}`},
		{name: "unknown strategy", raw: `{"strategy":"sticky"}`, wantErr: `session-affinity-filter "probe": parameter strategy="sticky"`},
		{name: "no load allowance on the filter", raw: `{"loadAllowance":2}`, wantErr: `session-affinity-filter "probe": parameter loadAllowance=2`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(pluginkit.WithRegisterer(context.Background(), prometheus.NewRegistry()))
			defer cancel()
			h := plugintest.Handle(ctx)
			p, err := Factory("probe", json.RawMessage(tt.raw), h)
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if p.TypedName().Type != Type || p.TypedName().Name != "probe" {
				t.Fatalf("typed name %v", p.TypedName())
			}
			cancel()
			<-p.(*Filter).Affinity().Done() // the sweeper stops with the handle's context
		})
	}
}
