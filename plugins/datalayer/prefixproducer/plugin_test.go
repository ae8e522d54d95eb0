package prefixproducer

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	k8stypes "k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestParseParameters(t *testing.T) {
	tests := []struct {
		name, raw string
		want      Parameters
		err       string
	}{
		{name: "defaults", raw: "", want: DefaultParameters()},
		{name: "null", raw: "null", want: DefaultParameters()},
		{name: "GIE fields", raw: `{"autoTune":false,"blockSizeTokens":32,"maxPrefixBlocksToMatch":8,"maxPrefixTokensToMatch":64,"lruCapacityPerServer":10}`,
			want: Parameters{BlockSizeTokens: 32, MaxPrefixBlocksToMatch: 8, MaxPrefixTokensToMatch: 64, ContextLengthTokens: DefaultContextLengthTokens, LRUCapacityPerServer: 10}},
		{name: "context length", raw: `{"contextLengthTokens":131072}`,
			want: Parameters{AutoTune: true, BlockSizeTokens: 16, ContextLengthTokens: 131072, LRUCapacityPerServer: DefaultLRUCapacityPerServer}},
		{name: "negative max blocks", raw: `{"maxPrefixBlocksToMatch":-1}`, err: "maxPrefixBlocksToMatch must be >= 0"},
		{name: "zero context length", raw: `{"contextLengthTokens":0}`, err: "contextLengthTokens must be > 0"},
		{name: "deprecated blockSize", raw: `{"blockSize":64,"blockSizeTokens":0}`, err: "BlockSize (64) is deprecated"},
		{name: "no block size without autoTune", raw: `{"autoTune":false,"blockSizeTokens":0}`, err: "BlockSizeTokens must be > 0"},
		{name: "negative max tokens", raw: `{"maxPrefixTokensToMatch":-1}`, err: "MaxPrefixTokensToMatch must be >= 0"},
		{name: "unknown field", raw: `{"blockSizeToken":16}`, err: "blockSizeToken"},
		{name: "wrong type", raw: `{"autoTune":"yes"}`, err: Type},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseParameters("test", json.RawMessage(tt.raw))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), Type) {
					t.Fatalf("err %v, want one naming %s and containing %q", err, Type, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func chat(model string, msgs ...string) *fwksched.LLMRequest {
	c := &fwksched.ChatCompletionsRequest{}
	for i := 0; i+1 < len(msgs); i += 2 {
		c.Messages = append(c.Messages, fwksched.Message{Role: msgs[i], Content: fwksched.Content{Raw: msgs[i+1]}})
	}
	return &fwksched.LLMRequest{TargetModel: model, Body: &fwksched.LLMRequestBody{ChatCompletions: c}}
}

func completion(model, prompt string) *fwksched.LLMRequest {
	return &fwksched.LLMRequest{TargetModel: model, Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: prompt}}}}
}

func TestHashPrompt(t *testing.T) {
	long := strings.Repeat("a", 1000)
	base := hashPrompt(chat("m", "user", long), 4, 256) // 16-byte blocks
	tests := []struct {
		name       string
		req        *fwksched.LLMRequest
		bs, max    int
		wantBlocks int
		samePrefix int // leading blocks equal to base's, -1 = not checked
	}{
		{name: "nil request", req: nil, bs: 4, max: 256, wantBlocks: 0, samePrefix: -1},
		{name: "no body", req: &fwksched.LLMRequest{}, bs: 4, max: 256, wantBlocks: 0, samePrefix: -1},
		{name: "shorter than a block", req: chat("m", "u", "x"), bs: 4, max: 256, wantBlocks: 0, samePrefix: -1},
		{name: "whole blocks only", req: chat("m", "user", long), bs: 4, max: 256, wantBlocks: (4 + 1 + 1000 + 1) / 16, samePrefix: (4 + 1 + 1000 + 1) / 16},
		{name: "maxBlocks truncates", req: chat("m", "user", long), bs: 4, max: 5, wantBlocks: 5, samePrefix: 5},
		{name: "zero maxBlocks", req: chat("m", "user", long), bs: 4, max: 0, wantBlocks: 0, samePrefix: -1},
		{name: "zero block size", req: chat("m", "user", long), bs: 0, max: 5, wantBlocks: 0, samePrefix: -1},
		{name: "other model shares nothing", req: chat("m2", "user", long), bs: 4, max: 256, wantBlocks: 62, samePrefix: 0},
		{name: "diverging suffix keeps the prefix", req: chat("m", "user", long[:500]+"b"+long[501:]), bs: 4, max: 256, wantBlocks: 62, samePrefix: (4 + 1 + 500) / 16},
		{name: "moved message boundary differs", req: chat("m", "use", "r"+long), bs: 4, max: 256, wantBlocks: 62, samePrefix: 0},
		{name: "completions", req: completion("m", long), bs: 4, max: 256, wantBlocks: 1000 / 16, samePrefix: -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hashPrompt(tt.req, tt.bs, tt.max)
			if len(got) != tt.wantBlocks {
				t.Fatalf("%d blocks, want %d", len(got), tt.wantBlocks)
			}
			if tt.samePrefix >= 0 {
				n := 0
				for n < len(got) && n < len(base) && got[n] == base[n] {
					n++
				}
				if n != tt.samePrefix {
					t.Fatalf("%d leading blocks shared with the base prompt, want %d", n, tt.samePrefix)
				}
			}
		})
	}
	// Pieces split anywhere hash as one stream, and a salt changes every block.
	salted := chat("m", "user", long)
	salted.Body.ChatCompletions.CacheSalt = "s"
	if s := hashPrompt(salted, 4, 256); s[0] == base[0] {
		t.Fatal("the cache salt must change the hashes")
	}
	blocks := chat("m")
	blocks.Body.ChatCompletions.Messages = []fwksched.Message{{Role: "user", Content: fwksched.Content{Structured: []fwksched.ContentBlock{{Type: "text", Text: long[:7]}, {Type: "text", Text: long[7:]}}}}}
	if len(hashPrompt(blocks, 4, 256)) == 0 {
		t.Fatal("text blocks are hashed")
	}
}

type ep struct {
	fwksched.Endpoint
	name string
	m    *fwkdl.Metrics
	attr map[string]fwkdl.Cloneable
}

func newEP(name string, m *fwkdl.Metrics) *ep {
	if m == nil {
		m = &fwkdl.Metrics{}
	}
	return &ep{name: name, m: m, attr: map[string]fwkdl.Cloneable{}}
}
func (e *ep) GetMetadata() *fwkdl.EndpointMetadata {
	return &fwkdl.EndpointMetadata{NamespacedName: k8stypes.NamespacedName{Namespace: "ns", Name: e.name}}
}
func (e *ep) GetMetrics() *fwkdl.Metrics           { return e.m }
func (e *ep) Put(k string, v fwkdl.Cloneable)      { e.attr[k] = v }
func (e *ep) Get(k string) (fwkdl.Cloneable, bool) { v, ok := e.attr[k]; return v, ok }
func (e *ep) info() *attrprefix.PrefixCacheMatchInfo {
	v, _ := e.Get(attrprefix.PrefixCacheMatchInfoKey)
	i, _ := v.(*attrprefix.PrefixCacheMatchInfo)
	return i
}
func (e *ep) String() string { return e.name }
func result(primary string, picks map[string]*ep) *fwksched.SchedulingResult {
	r := &fwksched.SchedulingResult{PrimaryProfileName: primary, ProfileResults: map[string]*fwksched.ProfileRunResult{}}
	for prof, e := range picks {
		r.ProfileResults[prof] = &fwksched.ProfileRunResult{TargetEndpoints: []fwksched.Endpoint{e}}
	}
	return r
}

type producer interface {
	fwkrc.PrepareDataPlugin
	fwkrc.PreRequest
}

// run sends requests through a producer, each picked as told, and returns each request's
// (match, total) per endpoint.
func run(t *testing.T, p producer, wait func(), eps []*ep, steps []step) [][][2]int {
	t.Helper()
	var out [][][2]int
	list := make([]fwksched.Endpoint, len(eps))
	for i, e := range eps {
		list[i] = e
	}
	for i, s := range steps {
		s.req.RequestId = fmt.Sprint("r", i)
		if err := p.PrepareRequestData(context.Background(), s.req, list); err != nil {
			t.Fatal(err)
		}
		var row [][2]int
		for _, e := range eps {
			in := e.info()
			row = append(row, [2]int{in.MatchBlocks(), in.TotalBlocks()})
		}
		out = append(out, row)
		picks := map[string]*ep{"decode": eps[s.decode]}
		if s.prefill >= 0 {
			picks["prefill"] = eps[s.prefill]
		}
		p.PreRequest(context.Background(), s.req, result("decode", picks))
		wait()
	}
	return out
}

type step struct {
	req             *fwksched.LLMRequest
	decode, prefill int
}

// On completions (the same bytes hashed as GIE hashes) pdgate's producer and GIE's give the
// same match and total blocks on every endpoint, request after request, including the
// prefill pick, the block-size cap and LRU eviction.
func TestMatchesGIEOnCompletions(t *testing.T) {
	a, b := strings.Repeat("alpha ", 200), strings.Repeat("beta ", 200)
	cases := []struct {
		name   string
		params string
		steps  func() []step
		eps    func() []*ep
	}{
		{name: "defaults", params: `{}`, eps: func() []*ep { return []*ep{newEP("p0", nil), newEP("p1", nil), newEP("p2", nil)} },
			steps: func() []step {
				return []step{{completion("m", a), 0, -1}, {completion("m", a+"x"), 1, -1}, {completion("m", b), 2, 0}, {completion("m", b+a), 1, -1},
					{completion("m", a[:300]), 2, -1}, {completion("m2", a), 0, -1}, {completion("m", b), 1, 2}}
			}},
		{name: "block size and cap", params: `{"autoTune":false,"blockSizeTokens":4,"maxPrefixTokensToMatch":40}`,
			eps: func() []*ep { return []*ep{newEP("p0", nil), newEP("p1", nil)} },
			steps: func() []step {
				return []step{{completion("m", a), 0, 1}, {completion("m", a), 1, -1}, {completion("m", b), 0, -1}}
			}},
		{name: "autoTune from metrics, tiny LRU evicts", params: `{}`,
			eps: func() []*ep {
				return []*ep{newEP("p0", &fwkdl.Metrics{CacheBlockSize: 8, CacheNumBlocks: 5}), newEP("p1", &fwkdl.Metrics{CacheBlockSize: 8, CacheNumBlocks: 50})}
			},
			steps: func() []step {
				return []step{{completion("m", a), 0, -1}, {completion("m", a), 1, -1}, {completion("m", b), 0, -1}, {completion("m", a), 0, -1}}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := plugintest.Handle(t.Context())
			gie, err := approximateprefix.ApproxPrefixCacheFactory("gie", json.RawMessage(tc.params), h)
			if err != nil {
				t.Fatal(err)
			}
			params, err := ParseParameters("test", json.RawMessage(tc.params))
			if err != nil {
				t.Fatal(err)
			}
			ours := New("ours", params, nil)
			want := run(t, gie.(producer), waitGIE, tc.eps(), tc.steps())
			got := run(t, ours, ours.wg.Wait, tc.eps(), tc.steps())
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("pdgate %v\n   GIE %v", got, want)
			}
		})
	}
}

// waitGIE waits for GIE's asynchronous index update (GIE exposes no wait; Add takes
// microseconds).
func waitGIE() { time.Sleep(20 * time.Millisecond) }

func TestPreRequestWithoutPicksOrState(t *testing.T) {
	p := New("p", DefaultParameters(), nil)
	r := completion("m", strings.Repeat("z", 200))
	r.RequestId = "x"
	p.PreRequest(context.Background(), r, result("decode", nil)) // no state, no pick: nothing
	p.PreRequest(context.Background(), nil, nil)
	e := newEP("p0", nil)
	_ = p.PrepareRequestData(context.Background(), r, []fwksched.Endpoint{e})
	p.PreRequest(context.Background(), r, &fwksched.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*fwksched.ProfileRunResult{}})
	// A pick whose snapshot this producer never prepared carries no blocks: nothing recorded.
	p.PreRequest(context.Background(), r, result("decode", map[string]*ep{"decode": newEP("p1", nil)}))
	p.wg.Wait()
	if p.idx.size() != 0 {
		t.Fatal("nothing is recorded without a pick or without the request's blocks")
	}
	p.PreRequest(context.Background(), r, result("decode", map[string]*ep{"decode": e}))
	p.wg.Wait()
	if p.idx.size() == 0 {
		t.Fatal("the prepared pick's blocks must be recorded")
	}
}

func TestPrefixCacheScorerProducer(t *testing.T) {
	cases := []struct {
		name, raw string
		wantErr   string
		wantBlock int
	}{
		{"defaults", "", "", DefaultBlockSizeTokens},
		{"null", "null", "", DefaultBlockSizeTokens},
		{"scorer parameters, unknown fields ignored as GIE does", `{"blockSizeTokens": 32, "hashBlockSize": 5}`, "", 32},
		{"deprecated blockSize alone", `{"blockSize": 64, "blockSizeTokens": 0}`, "BlockSize (64) is deprecated", 0},
		{"not JSON", `{"blockSizeTokens": "x"}`, "failed to unmarshal", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := NewPrefixCacheScorerProducer(json.RawMessage(tc.raw), nil)
			if plugintest.WantErr(t, err, tc.wantErr, "prefix-cache-scorer") {
				return
			}
			if got := p.TypedName(); got.Type != GIEType || got.Name != GIEType {
				t.Fatalf("typed name %v, want GIE's %s/%s", got, GIEType, GIEType)
			}
			if p.Params().BlockSizeTokens != tc.wantBlock {
				t.Fatalf("blockSizeTokens %d, want %d", p.Params().BlockSizeTokens, tc.wantBlock)
			}
		})
	}
}

func FuzzHashPrompt(f *testing.F) {
	f.Add("user", "hello world, a prompt long enough to fill a block or two", 4, 8)
	f.Fuzz(func(t *testing.T, role, text string, bs, maxBlocks int) {
		bs, maxBlocks = bs%64, maxBlocks%64
		got := hashPrompt(chat("m", role, text), bs, maxBlocks)
		n := len(role) + len(text) + 2
		want := 0
		if bs > 0 && maxBlocks > 0 {
			want = min(n/(bs*CharactersPerToken), maxBlocks)
		}
		if len(got) != want {
			t.Fatalf("%d blocks, want %d", len(got), want)
		}
	})
}

func FuzzParseParameters(f *testing.F) {
	f.Add(`{"autoTune":false,"blockSizeTokens":3}`)
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := ParseParameters("test", json.RawMessage(raw))
		if err == nil && !p.AutoTune && p.BlockSizeTokens <= 0 {
			t.Fatalf("accepted %+v", p)
		}
	})
}

// TestRecordCapacity: how long each server's record is decides whether a prompt survives the
// next one on the same server. Prompt a (37 blocks of 8 tokens) then b (31) on p0, then a again:
// its match on p0 is what the record kept. Without autoTune the record is lruCapacityPerServer
// (GIE v1.5.0 used its default whatever was set); with it, the server's GPU blocks; an offload
// tier (offloadTokensPerServer) adds its blocks, since the server still serves what its GPU
// evicted there. Bad values are refused naming the field.
func TestRecordCapacity(t *testing.T) {
	a, b := strings.Repeat("alpha ", 200), strings.Repeat("beta ", 200)
	steps := func() []step {
		return []step{{completion("m", a), 0, -1}, {completion("m", b), 0, -1}, {completion("m", a), 1, -1}}
	}
	fiveGPUBlocks := func() []*ep {
		return []*ep{newEP("p0", &fwkdl.Metrics{CacheBlockSize: 8, CacheNumBlocks: 5}), newEP("p1", &fwkdl.Metrics{CacheBlockSize: 8, CacheNumBlocks: 5})}
	}
	unknownBlocks := func() []*ep { return []*ep{newEP("p0", nil), newEP("p1", nil)} }
	tests := []struct {
		name   string
		params string
		eps    func() []*ep
		wantA  int // a's matched blocks on p0 at the third request
	}{
		{"GPU only: b evicts a", `{}`, fiveGPUBlocks, 0},
		{"an offload tier of 800 tokens keeps a", `{"offloadTokensPerServer":800}`, fiveGPUBlocks, 37},
		{"a smaller tier keeps its head", `{"offloadTokensPerServer":400}`, fiveGPUBlocks, 24},
		{"no autoTune: the default capacity keeps a", `{"autoTune":false,"blockSizeTokens":8}`, unknownBlocks, 37},
		{"no autoTune: 40 blocks keep a's head only", `{"autoTune":false,"blockSizeTokens":8,"lruCapacityPerServer":40}`, unknownBlocks, 9},
		{"autoTune ignores lruCapacityPerServer", `{"blockSizeTokens":8,"lruCapacityPerServer":40}`, unknownBlocks, 37},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			params, err := ParseParameters("test", json.RawMessage(tc.params))
			if err != nil {
				t.Fatal(err)
			}
			p := New("ours", params, nil)
			got := run(t, p, p.wg.Wait, tc.eps(), steps())
			if m := got[2][0][0]; m != tc.wantA {
				t.Fatalf("a matches %d blocks on p0 after b, want %d (all rows %v)", m, tc.wantA, got)
			}
		})
	}
	// A server that takes requests before its metrics show its cache: its record takes the
	// reported GPU blocks once they appear, so b evicts a as on a server seen with them.
	t.Run("autoTune: GPU blocks reported after the first request", func(t *testing.T) {
		params, err := ParseParameters("test", json.RawMessage(`{"blockSizeTokens":8}`))
		if err != nil {
			t.Fatal(err)
		}
		p := New("ours", params, nil)
		eps, s := unknownBlocks(), steps()
		run(t, p, p.wg.Wait, eps, s[:1])
		for _, e := range eps {
			e.m = &fwkdl.Metrics{CacheBlockSize: 8, CacheNumBlocks: 5}
		}
		got := run(t, p, p.wg.Wait, eps, s[1:])
		if m := got[1][0][0]; m != 0 {
			t.Fatalf("a matches %d blocks on p0 after b, want 0: the record kept autoTune's default capacity (rows %v)", m, got)
		}
	})
	for raw, field := range map[string]string{
		`{"offloadTokensPerServer":-1}`:               "offloadTokensPerServer",
		`{"autoTune":false,"lruCapacityPerServer":0}`: "lruCapacityPerServer",
	} {
		if _, err := ParseParameters("test", json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: %v, want an error naming %s", raw, err, field)
		}
	}
}

// The endpoints that match nothing share one match value (GIE's has getters only, so none of
// its readers can change it for another); each endpoint that matches gets its own count.
func TestUnmatchedEndpointsShareOneValue(t *testing.T) {
	p := New("p", DefaultParameters(), nil)
	eps := []*ep{newEP("p0", nil), newEP("p1", nil), newEP("p2", nil), newEP("p3", nil)}
	prompt := completion("m", strings.Repeat("shared prefix ", 40))
	steps := []step{{req: prompt, decode: 2, prefill: -1}, {req: completion("m", strings.Repeat("shared prefix ", 40)), decode: 0, prefill: -1}}
	rows := run(t, p, p.Wait, eps, steps)
	if got := rows[1][2]; got[0] == 0 || got[0] != got[1] {
		t.Fatalf("the endpoint holding the prompt matched %v, want all of it", got)
	}
	if eps[0].info() != eps[1].info() || eps[1].info() != eps[3].info() {
		t.Fatal("the unmatched endpoints got a value each")
	}
	if in := eps[0].info(); in.MatchBlocks() != 0 || in.TotalBlocks() != rows[1][2][1] {
		t.Fatalf("unmatched value %d of %d blocks, want 0 of %d", in.MatchBlocks(), in.TotalBlocks(), rows[1][2][1])
	}
	if eps[2].info() == eps[0].info() {
		t.Fatal("the matching endpoint shares the unmatched value")
	}
}
