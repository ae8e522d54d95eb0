package simbench

import (
	"context"
	"slices"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/cmd/sim/kvcache"
	"github.com/pdgate/pdgate/plugins/lib/tokenestimate"
)

var smallPrefix = SharedPrefix{Prefixes: 20, PrefixTokens: [2]int{200, 400}, SuffixTokens: [2]int{10, 30}, Output: [2]int{4, 8}, Zipf: 1.2}

// The workload is the same for every policy given a seed, and its token ids are what the EPP's
// estimate derives from the body (so the precise index's keys match the engines' blocks).
func TestSharedPrefixSource(t *testing.T) {
	a, err := NewSharedPrefixSource(smallPrefix, "m", 10, 7, 50)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := NewSharedPrefixSource(smallPrefix, "m", 10, 7, 50)
	n := 0
	for {
		x, ok := a.Next()
		y, ok2 := b.Next()
		if ok != ok2 {
			t.Fatal("sources of one seed end at different requests")
		}
		if !ok {
			break
		}
		n++
		if x.At != y.At || !slices.Equal(x.Tokens, y.Tokens) || x.Output != y.Output {
			t.Fatalf("request %d differs between two sources of one seed", n)
		}
		est := tokenestimate.Estimate(&fwksched.LLMRequest{Body: x.Body}, tokenestimate.EstimateParams{})
		if !slices.Equal(est.TokenIDs, x.Tokens) {
			t.Fatalf("request %d: simulator tokens differ from the EPP's estimate", n)
		}
	}
	if n != 50 {
		t.Fatalf("got %d requests, want 50", n)
	}
	if _, err := NewSharedPrefixSource(SharedPrefix{Prefixes: 1, Zipf: 1}, "m", 1, 1, 1); err == nil {
		t.Fatal("an invalid workload was accepted")
	}
}

// After a run with the precise policy, the EPP's index (fed in process by the pods' KV events)
// reports a hot prefix on the pods that cached it: keys and blocks agree end to end.
func TestPreciseIndexFedInProcess(t *testing.T) {
	prof, err := loadProfile(Options{Root: "../../../.."})
	if err != nil {
		t.Fatal(err)
	}
	var precise Policy
	for _, p := range PrefixPolicies {
		if p.Name == "prefix-precise" {
			precise = p
		}
	}
	for _, routers := range []int{1, 2} {
		src, err := NewSharedPrefixSource(smallPrefix, prof.Model, 20, 3, 300)
		if err != nil {
			t.Fatal(err)
		}
		s, err := New(Config{Profile: prof, Pods: precise.fleet(4, prof.Model), EPPConfig: precise.configPath("../../../.."),
			Model: prof.Model, Source: src, Routers: routers})
		if err != nil {
			t.Fatal(err)
		}
		res, err := s.Run()
		if err != nil {
			t.Fatal(err)
		}
		if res.Summary.Served != 300 || !(res.Summary.PrefixHitRate > 0) {
			t.Fatalf("%d routers: served %d, prefix-hit rate %v", routers, res.Summary.Served, res.Summary.PrefixHitRate)
		}
		probe, _ := NewSharedPrefixSource(smallPrefix, prof.Model, 20, 3, 1)
		a, _ := probe.Next()
		for i, e := range s.epps {
			if len(e.kv) != 1 {
				t.Fatalf("router %d: %d KV-event sinks, want the precise scorer", i, len(e.kv))
			}
			snap := make([]fwksched.Endpoint, len(s.pods))
			for j, p := range s.pods {
				snap[j] = fwksched.NewEndpoint(p.meta, p.metrics, p.attrs.Clone())
			}
			req := &fwksched.LLMRequest{RequestId: "probe", TargetModel: prof.Model, Body: a.Body, Headers: map[string]string{}}
			for _, p := range e.core.Server.Hooks().PrepareData {
				_ = p.PrepareRequestData(context.Background(), req, snap)
			}
			best, want := 0, 0
			for j, ep := range snap {
				if v, ok := ep.Get(attrprefix.PrefixCacheMatchInfoKey); ok {
					best = max(best, v.(*attrprefix.PrefixCacheMatchInfo).MatchBlocks())
				}
				want = max(want, s.pods[j].cache.Match(kvcache.BlockHashes(a.Tokens, prof.BlockSize)))
			}
			if want == 0 || best != want {
				t.Fatalf("%d routers, router %d: the index matches %d blocks of a hot prefix, the pods hold %d", routers, i, best, want)
			}
		}
	}
}
