package preciseproducer

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/deciders/prefixdecider"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/precise/internal/precisecache"
	"github.com/pdgate/pdgate/plugins/precise/kvevents"
	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func endpoint(name, addr string) fwksched.Endpoint {
	return eptest.Scheduling(eptest.Spec{Name: name, Address: addr, Port: "8000"})
}

func request(tokens []uint32) *fwksched.LLMRequest {
	return &fwksched.LLMRequest{RequestId: "r", TargetModel: "m", Headers: map[string]string{},
		TokenizedPrompt: &fwksched.TokenizedPrompt{TokenIDs: tokens}}
}

func newProducer(t *testing.T, raw string) *Producer {
	t.Helper()
	return plugintest.Build[*Producer](t, Factory, "ppc", raw, nil)
}

// storeOn reports, as the engine at addr would, that it holds the first n tokens.
func storeOn(p *Producer, addr string, tokens []uint32, n int) {
	hs := make([]uint64, n/16)
	for i := range hs {
		hs[i] = uint64(1000 + i)
	}
	p.PreciseCore().Index().Apply(kvevents.SourceKey{Endpoint: addr + ":8000"},
		[]kvwire.Event{{Kind: kvwire.KindStored, Hashes: hs, Tokens: tokens[:n], BlockSize: 16, Medium: "GPU"}})
}

func TestPrefixCacheMatchInfoFeedsDeciderAndGate(t *testing.T) {
	prompt := make([]uint32, 160) // 10 blocks
	for i := range prompt {
		prompt[i] = uint32(i * 7)
	}
	tests := []struct {
		name          string
		cachedTokens  int // stored on the decode pod by events
		removed       bool
		wantMatch     int
		wantDisagg    bool
		wantGate412   bool
		nonCachedTkns int
	}{
		{name: "nothing cached: disaggregate, 412", cachedTokens: 0, wantMatch: 0, wantDisagg: true, wantGate412: true, nonCachedTkns: 32},
		{name: "stored: decode-only, forwarded", cachedTokens: 160, wantMatch: 10, wantDisagg: false, wantGate412: false, nonCachedTkns: 32},
		{name: "partly stored: the rest is long enough to disaggregate", cachedTokens: 64, wantMatch: 4, wantDisagg: true, wantGate412: true, nonCachedTkns: 32},
		{name: "stored then cleared: disaggregate again", cachedTokens: 160, removed: true, wantMatch: 0, wantDisagg: true, wantGate412: true, nonCachedTkns: 32},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := newProducer(t, `{"tokenProcessorConfig":{"blockSizeTokens":16}}`)
			if tc.cachedTokens > 0 {
				storeOn(p, "10.0.0.2", prompt, tc.cachedTokens)
			}
			if tc.removed {
				p.PreciseCore().Index().Apply(kvevents.SourceKey{Endpoint: "10.0.0.2:8000"}, []kvwire.Event{{Kind: kvwire.KindCleared}})
			}
			decode, other := endpoint("decode-0", "10.0.0.2"), endpoint("decode-1", "10.0.0.3")
			req := request(prompt)
			if err := p.PrepareRequestData(context.Background(), req, []fwksched.Endpoint{decode, other}); err != nil {
				t.Fatal(err)
			}
			raw, ok := decode.Get(attrprefix.PrefixCacheMatchInfoKey)
			if !ok {
				t.Fatal("no PrefixCacheMatchInfo")
			}
			info := raw.(*attrprefix.PrefixCacheMatchInfo)
			if info.MatchBlocks() != tc.wantMatch || info.TotalBlocks() != 10 || info.BlockSizeTokens() != 16 {
				t.Fatalf("match info = %d/%d×%d, want %d/10×16", info.MatchBlocks(), info.TotalBlocks(), info.BlockSizeTokens(), tc.wantMatch)
			}
			if raw, _ := other.Get(attrprefix.PrefixCacheMatchInfoKey); raw.(*attrprefix.PrefixCacheMatchInfo).MatchBlocks() != 0 {
				t.Fatal("the other pod matched blocks it never stored")
			}
			d := prefixdecider.New("pd", prefixdecider.Parameters{NonCachedTokens: tc.nonCachedTkns})
			if got := d.Disaggregate(context.Background(), nil, req, decode).Run; got != tc.wantDisagg {
				t.Errorf("disaggregate = %v, want %v", got, tc.wantDisagg)
			}
			if got, reason := d.ShouldRejectConditionalDecode(context.Background(), req, decode); got != tc.wantGate412 {
				t.Errorf("412 = %v (%s), want %v", got, reason, tc.wantGate412)
			}
			if s := precisecache.Score(decode); s != float64(tc.wantMatch)/10 {
				t.Errorf("score = %v, want %v", s, float64(tc.wantMatch)/10)
			}
		})
	}
}

func TestFactoryErrorsNamePluginAndField(t *testing.T) {
	tests := []struct {
		raw  string
		want string
	}{
		{`{"noSuchParameter":1}`, "noSuchParameter"},
		{`{"indexerConfig":{"tokenizersPoolConfig":{"modelName":"x"}}}`, "tokenizersPoolConfig"},
		{`{"kvEventsConfig":{"podDiscoveryConfig":{"socketPort":-2}}}`, "socketPort"},
	}
	for _, tc := range tests {
		_, err := Factory("my-ppc", json.RawMessage(tc.raw), nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "my-ppc") || !strings.Contains(err.Error(), Type) {
			t.Errorf("%s: err = %v", tc.raw, err)
		}
	}
}
