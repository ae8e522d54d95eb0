package precisecache

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/precise/kvevents"
	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
)

func endpoint(name, addr, port string) *fwkdl.ModelServer {
	return fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}, Address: addr, Port: port}, fwkdl.NewMetrics())
}

func lister(eps ...*fwkdl.ModelServer) pluginkit.EndpointLister {
	return func() []fwkdl.Endpoint {
		out := make([]fwkdl.Endpoint, len(eps))
		for i, ep := range eps {
			out[i] = ep
		}
		return out
	}
}

func TestResolveTopicEndpoints(t *testing.T) {
	pool := lister(
		endpoint("alone", "10.0.0.2", "8000"),
		endpoint("shared-a", "10.0.0.1", "8000"), endpoint("shared-b", "10.0.0.1", "8001"),
		endpoint("dp-rank-0", "10.0.0.3", "8000"), endpoint("dp-rank-1", "10.0.0.3", "8001"),
		endpoint("v6", "fd00::1", "8000"),
	)
	tests := []struct {
		topicEndpoint string
		rank          int
		want          kvevents.SourceKey
		how           kvevents.Resolution
	}{
		{"10.0.0.2:8000", 0, kvevents.SourceKey{Endpoint: "10.0.0.2:8000"}, kvevents.ResolvedExact},
		{"10.0.0.2", 0, kvevents.SourceKey{Endpoint: "10.0.0.2:8000"}, kvevents.ResolvedByAddress},
		{"10.0.0.2:5557", 0, kvevents.SourceKey{Endpoint: "10.0.0.2:8000"}, kvevents.ResolvedByAddress},
		{"10.0.0.1", 0, kvevents.SourceKey{}, kvevents.Ambiguous},
		{"10.0.0.1:8001", 0, kvevents.SourceKey{Endpoint: "10.0.0.1:8001"}, kvevents.ResolvedExact},
		{"10.0.0.1:9999", 0, kvevents.SourceKey{}, kvevents.Ambiguous},
		{"10.0.0.3", 1, kvevents.SourceKey{Endpoint: "10.0.0.3:8001", Rank: 1}, kvevents.ResolvedByAddress},
		{"10.0.0.3:8000", 1, kvevents.SourceKey{Endpoint: "10.0.0.3:8001", Rank: 1}, kvevents.ResolvedByAddress},
		{"fd00::1", 0, kvevents.SourceKey{Endpoint: "[fd00::1]:8000"}, kvevents.ResolvedByAddress},
		{"[fd00::1]:8000", 0, kvevents.SourceKey{Endpoint: "[fd00::1]:8000"}, kvevents.ResolvedExact},
		{"10.9.9.9", 0, kvevents.SourceKey{}, kvevents.Unmatched},
		{"junk", 0, kvevents.SourceKey{}, kvevents.Unmatched},
	}
	p := &poolView{list: pool, engines: map[string]*engineSeen{}}
	for _, tc := range tests {
		got, how := p.resolve(tc.topicEndpoint, tc.rank)
		if got != tc.want || how != tc.how {
			t.Errorf("resolve(%q, %d) = %+v %s, want %+v %s", tc.topicEndpoint, tc.rank, got, how, tc.want, tc.how)
		}
	}
	unchecked := &poolView{}
	if got, how := unchecked.resolve("10.0.0.2", 0); got.Endpoint != "10.0.0.2" || how != kvevents.ResolvedUnchecked {
		t.Errorf("without a pool: %+v %s", got, how)
	}
}

// A pod that joins after the directory was built is found by its first message.
func TestResolveFindsANewPod(t *testing.T) {
	eps := []*fwkdl.ModelServer{endpoint("a", "10.0.0.1", "8000")}
	p := &poolView{list: func() []fwkdl.Endpoint {
		out := []fwkdl.Endpoint{}
		for _, e := range eps {
			out = append(out, e)
		}
		return out
	}, engines: map[string]*engineSeen{}}
	if _, how := p.resolve("10.0.0.2", 0); how != kvevents.Unmatched {
		t.Fatalf("before it joins: %s", how)
	}
	eps = append(eps, endpoint("b", "10.0.0.2", "8000"))
	p.builtAt = time.Now().Add(-time.Second) // past the miss refresh, within the max age
	if _, how := p.resolve("10.0.0.2", 0); how != kvevents.ResolvedByAddress {
		t.Fatalf("after it joined: %s", how)
	}
}

func withEngine(ep *fwkdl.ModelServer, scraped time.Time, processStart float64) *fwkdl.ModelServer {
	m := fwkdl.NewMetrics()
	m.UpdateTime = scraped
	ep.UpdateMetrics(m)
	if processStart != 0 {
		ep.GetAttributes().Put(engineattr.AttributeKey, &engineattr.Metrics{ProcessStart: processStart, HasProcessStart: true})
	}
	return ep
}

// The pool watch drops an endpoint's blocks when it leaves the pool, when its engine stops
// being scraped (down), or when its process start time changes (restarted), before the engine
// publishes anything new.
func TestPoolWatchDropsBlocksOfGoneAndRestartedEngines(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := []struct {
		name       string
		before     *fwkdl.ModelServer // the engine at the first check
		after      *fwkdl.ModelServer // at the second check (nil: left the pool)
		wantReason string             // "" = keeps its blocks
	}{
		{"healthy engine keeps its blocks", withEngine(endpoint("a", "10.0.0.1", "8000"), now, 100),
			withEngine(endpoint("a", "10.0.0.1", "8000"), now.Add(time.Second), 100), ""},
		{"left the pool", withEngine(endpoint("a", "10.0.0.1", "8000"), now, 0), nil, kvevents.ResyncRemoved},
		{"metrics unscraped past the bound", withEngine(endpoint("a", "10.0.0.1", "8000"), now, 0),
			withEngine(endpoint("a", "10.0.0.1", "8000"), now.Add(-3*time.Second), 0), kvevents.ResyncUnreachable},
		{"new process start time", withEngine(endpoint("a", "10.0.0.1", "8000"), now, 100),
			withEngine(endpoint("a", "10.0.0.1", "8000"), now.Add(time.Second), 250), kvevents.ResyncEngineRestart},
		{"never scraped is not down", withEngine(endpoint("a", "10.0.0.1", "8000"), time.Time{}, 0),
			withEngine(endpoint("a", "10.0.0.1", "8000"), time.Time{}, 0), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			current := []*fwkdl.ModelServer{tc.before}
			ctx := pluginkit.WithEndpoints(context.Background(), func() []fwkdl.Endpoint {
				out := []fwkdl.Endpoint{}
				for _, e := range current {
					out = append(out, e)
				}
				return out
			})
			_, r, err := kvevents.ParseConfig("test", "test", []byte(`{"kvEventsConfig":{"zmqEndpoint":"tcp://127.0.0.1:0"}}`))
			if err != nil {
				t.Fatal(err)
			}
			c := New(ctx, "test", r, false)
			src := kvevents.SourceKey{Endpoint: "10.0.0.1:8000"}
			c.checkPool(now)
			c.Index().Apply(src, []kvwire.Event{{Kind: kvwire.KindStored, Hashes: []uint64{1}, Tokens: make([]uint32, 16), BlockSize: 16}})
			current = nil
			if tc.after != nil {
				current = []*fwkdl.ModelServer{tc.after}
			}
			c.checkPool(now.Add(time.Second))
			held := c.Index().Holds(src) > 0
			if held != (tc.wantReason == "") {
				t.Fatalf("holds blocks = %v, want %v", held, tc.wantReason == "")
			}
		})
	}
}
