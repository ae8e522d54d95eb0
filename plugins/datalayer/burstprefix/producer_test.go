package burstprefix

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func prompt(seed uint32, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = seed*1000 + uint32(i)
	}
	return out
}

// burst sends the prompts concurrently (one window) and returns, per request, the replica
// whose match info is full.
func burst(t *testing.T, b *Producer, prompts [][]uint32) []string {
	t.Helper()
	out := make([]string, len(prompts))
	var wg sync.WaitGroup
	for i, p := range prompts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var eps []fwksched.Endpoint
			for _, n := range []string{"r0", "r1", "r2"} {
				eps = append(eps, eptest.Scheduling(eptest.Spec{Namespace: "ns", Name: n, Metrics: &fwkdl.Metrics{}}))
			}
			req := &fwksched.LLMRequest{TargetModel: "m", TokenizedPrompt: &fwksched.TokenizedPrompt{TokenIDs: p}}
			if err := b.PrepareRequestData(context.Background(), req, eps); err != nil {
				t.Error(err)
				return
			}
			for _, ep := range eps {
				v, _ := ep.Get(attrprefix.PrefixCacheMatchInfoKey)
				if mi := v.(*attrprefix.PrefixCacheMatchInfo); mi.MatchBlocks() > 0 && mi.MatchBlocks() == mi.TotalBlocks() {
					out[i] = ep.GetMetadata().NamespacedName.Name
				}
			}
		}()
	}
	wg.Wait()
	return out
}

func TestGroupsColocate(t *testing.T) {
	b, err := Factory("burst", json.RawMessage(`{"windowDurationMs":50,"blockSizeTokens":4}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	a, c := prompt(1, 16), prompt(2, 16)
	got := burst(t, b.(*Producer), [][]uint32{a, a, a, a, c, c, prompt(3, 16)})
	if got[0] == "" || got[0] != got[1] || got[1] != got[2] || got[2] != got[3] {
		t.Fatalf("group a spread over %v", got[:4])
	}
	if got[4] == "" || got[4] != got[5] || got[4] == got[0] {
		t.Fatalf("group c on %v, group a on %s: want one other replica", got[4:6], got[0])
	}
	if got[6] != "" {
		t.Fatalf("a singleton got a placement: %s", got[6])
	}
}

func TestMaxPerReplicaSpills(t *testing.T) {
	b, _ := Factory("burst", json.RawMessage(`{"windowDurationMs":50,"blockSizeTokens":4,"maxPerReplica":2}`), nil)
	a := prompt(1, 16)
	got := burst(t, b.(*Producer), [][]uint32{a, a, a, a})
	count := map[string]int{}
	for _, r := range got {
		count[r]++
	}
	if len(count) != 2 || count[""] != 0 {
		t.Fatalf("placements %v, want 2 replicas × 2", got)
	}
}

func TestParameters(t *testing.T) {
	for raw, want := range map[string]string{
		`{"windowDurationMs":0}`:        "windowDurationMs",
		`{"maxPerReplica":0}`:           "maxPerReplica",
		`{"maxPrefixTokensToMatch":10}`: "maxPrefixTokensToMatch",
		`{"balanceBy":"bytes"}`:         "balanceBy",
		`{"window":1}`:                  "window",
	} {
		if _, err := ParseParameters("b", json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %s", raw, err, want)
		}
	}
}
