package aibrixprefillscorer

import (
	"context"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func ep(name string, running float64, match *attrprefix.PrefixCacheMatchInfo) fwksched.Endpoint {
	e := eptest.Scheduling(eptest.Spec{Namespace: "ns", Name: name, PodName: name})
	e.Put(engineattr.AttributeKey, &engineattr.Metrics{Running: running, HasRunning: true})
	if match != nil {
		e.Put(attrprefix.PrefixCacheMatchInfoKey, match)
	}
	return e
}

func TestScorerPlugin(t *testing.T) {
	for _, pol := range []string{"token_load", "hybrid_cache_load"} {
		if _, err := Factory("p", []byte(`{"prefillScorePolicy":"`+pol+`"}`), nil); err == nil || !strings.Contains(err.Error(), "aibrix-pd-pair") {
			t.Fatalf("%s must be refused: %v", pol, err)
		}
	}
	pl, err := Factory("p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := pl.(*Scorer)
	cached := ep("cached", 1, attrprefix.NewPrefixCacheMatchInfo(8, 10, 16))
	cold := ep("cold", 0, nil)
	got := s.Score(context.Background(), nil, &fwksched.LLMRequest{Headers: map[string]string{}}, []fwksched.Endpoint{cached, cold})
	// prefix_cache: cached (100−80)·0.1 + 1/1 = 3; cold 10 + 0 = 10 → cached wins.
	if got[cached] != 1 || got[cold] != 0 {
		t.Fatalf("scores %v", got)
	}
	if MatchPercent(cached) != 80 || MatchPercent(cold) != 0 {
		t.Fatal("match percent")
	}
}

// The scorer reads GIE's prefix match, so it declares it (the EPP then adds the producer).
func TestScorerConsumesPrefixMatch(t *testing.T) {
	pl, err := Factory("p", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := pl.(*Scorer).Consumes()[attrprefix.PrefixCacheMatchInfoKey]; !ok {
		t.Fatal("the scorer must declare PrefixCacheMatchInfo")
	}
}
