package nohitlru

import (
	"context"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func pool(match map[string]int) []fwksched.Endpoint {
	var out []fwksched.Endpoint
	for _, n := range []string{"a", "b", "c"} {
		ep := eptest.Scheduling(eptest.Spec{Name: n, NoMetrics: true})
		ep.Put(attrprefix.PrefixCacheMatchInfoKey, attrprefix.NewPrefixCacheMatchInfo(match[n], 4, 16))
		out = append(out, ep)
	}
	return out
}

func TestColdRequestsSpread(t *testing.T) {
	s := plugintest.Build[*Scorer](t, Factory, "lru", `{"lruSize": 2048}`, nil)
	picked := map[string]bool{}
	for i := 0; i < 3; i++ {
		eps := pool(nil)
		scores := s.Score(context.Background(), nil, nil, eps)
		best := eps[0]
		for _, ep := range eps {
			if scores[ep] > scores[best] {
				best = ep
			}
		}
		picked[best.GetMetadata().NamespacedName.Name] = true
		s.PreRequest(context.Background(), nil, &fwksched.SchedulingResult{PrimaryProfileName: "d",
			ProfileResults: map[string]*fwksched.ProfileRunResult{"d": {TargetEndpoints: []fwksched.Endpoint{best}}}})
	}
	if len(picked) != 3 {
		t.Fatalf("three cold requests went to %v, want three different pods", picked)
	}
	// The least recently used of the three now scores highest.
	eps := pool(nil)
	scores := s.Score(context.Background(), nil, nil, eps)
	if !(scores[eps[0]] > scores[eps[1]] && scores[eps[1]] > scores[eps[2]]) {
		t.Fatalf("scores %v %v %v, want a > b > c", scores[eps[0]], scores[eps[1]], scores[eps[2]])
	}
	warm := pool(map[string]int{"b": 2})
	for ep, v := range s.Score(context.Background(), nil, nil, warm) {
		if v != 0.5 {
			t.Fatalf("warm request: %s scored %v, want 0.5", ep.GetMetadata().NamespacedName.Name, v)
		}
	}
}
