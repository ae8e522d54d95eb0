package prefixproducer

import (
	"context"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// A long prompt cached on one pod matches all its blocks by default (GIE's 256-block cap
// matched 4,096 tokens of it), an explicit cap is honoured, a follow-up turn matches exactly
// the previous turn's blocks, and a prompt diverging past the dense blocks matches within a
// checkpoint stride of the shared prefix, never more.
func TestWholePromptMatch(t *testing.T) {
	const bs = 16 // tokens; 64-byte blocks
	blocks := func(r *fwksched.LLMRequest) int { return len(hashPrompt(r, bs, 1<<30)) }
	// Sizes off powers of two: a prompt whose last block falls on a checkpoint would not
	// exercise the gap probe.
	p22, p100, p1m := benchPrompt(22_000, 1), benchPrompt(100_000, 2), benchPrompt(1_000_000, 3)
	followUp := func(r *fwksched.LLMRequest, extra string) *fwksched.LLMRequest {
		m := r.Body.ChatCompletions.Messages
		return chat("m", "system", m[0].Content.Raw, "user", m[1].Content.Raw, "assistant", "an answer", "user", extra)
	}
	diverged := func(r *fwksched.LLMRequest, at int) *fwksched.LLMRequest {
		m := r.Body.ChatCompletions.Messages
		u := m[1].Content.Raw
		return chat("m", "system", m[0].Content.Raw, "user", u[:at]+"#"+u[at+1:])
	}
	cases := []struct {
		name         string
		params       func(*Parameters)
		cached, sent *fwksched.LLMRequest
		want         func(got int) bool
		wantText     string
	}{
		{name: "22 KB fully cached", cached: p22, sent: p22, want: func(g int) bool { return g == blocks(p22) }, wantText: "all blocks"},
		{name: "100 KB fully cached", cached: p100, sent: p100, want: func(g int) bool { return g == blocks(p100) }, wantText: "all blocks"},
		{name: "1 MB fully cached", cached: p1m, sent: p1m, want: func(g int) bool { return g == blocks(p1m) }, wantText: "all blocks"},
		{name: "explicit GIE cap honoured", params: func(p *Parameters) { p.MaxPrefixBlocksToMatch = GIEMaxPrefixBlocks }, cached: p100, sent: p100,
			want: func(g int) bool { return g == GIEMaxPrefixBlocks }, wantText: "256"},
		{name: "maxPrefixTokensToMatch honoured", params: func(p *Parameters) { p.MaxPrefixTokensToMatch = 8192 }, cached: p100, sent: p100,
			want: func(g int) bool { return g == 8192/bs }, wantText: "512"},
		{name: "context length caps", params: func(p *Parameters) { p.ContextLengthTokens = 16384 }, cached: p100, sent: p100,
			want: func(g int) bool { return g == 16384/bs }, wantText: "1024"},
		{name: "follow-up turn matches the previous turn exactly", cached: p100, sent: followUp(p100, benchPrompt(5000, 9).Body.ChatCompletions.Messages[1].Content.Raw),
			want: func(g int) bool { return g == blocks(p100) }, wantText: "the previous turn's blocks"},
		{name: "follow-up of a 1 MB turn", cached: p1m, sent: followUp(p1m, benchPrompt(3000, 10).Body.ChatCompletions.Messages[1].Content.Raw),
			want: func(g int) bool { return g == blocks(p1m) }, wantText: "the previous turn's blocks"},
		{name: "divergence past the dense blocks", cached: p100, sent: diverged(p100, 50_000), want: func(g int) bool {
			shared := (len("system") + 1 + len("You are a careful assistant.") + 1 + len("user") + 1 + 50_000) / (bs * CharactersPerToken)
			return g <= shared && g > shared-checkpointStride
		}, wantText: "the shared prefix, less under one stride"},
		{name: "divergence in the dense blocks is exact", cached: p100, sent: diverged(p100, 5_000), want: func(g int) bool {
			return g == (len("system")+1+len("You are a careful assistant.")+1+len("user")+1+5_000)/(bs*CharactersPerToken)
		}, wantText: "the shared prefix"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			params := DefaultParameters()
			params.AutoTune, params.BlockSizeTokens = false, bs
			params.LRUCapacityPerServer = 1 << 20
			if tc.params != nil {
				tc.params(&params)
			}
			p := New("p", params, nil)
			holder, other := newEP("holder", nil), newEP("other", nil)
			eps := []fwksched.Endpoint{holder, other}
			if err := p.PrepareRequestData(context.Background(), tc.cached, eps); err != nil {
				t.Fatal(err)
			}
			p.PreRequest(context.Background(), tc.cached, result("decode", map[string]*ep{"decode": holder}))
			p.Wait()
			if err := p.PrepareRequestData(context.Background(), tc.sent, eps); err != nil {
				t.Fatal(err)
			}
			if got := holder.info().MatchBlocks(); !tc.want(got) {
				t.Fatalf("holder matched %d of %d blocks, want %s", got, holder.info().TotalBlocks(), tc.wantText)
			}
			if got := other.info().MatchBlocks(); got != 0 {
				t.Fatalf("a pod that never got the prompt matched %d blocks", got)
			}
		})
	}
}

// A checkpoint weighs the blocks it stands for in the server's LRU: a server whose capacity
// holds one long prompt's blocks keeps one, not as many as its entries would fit.
func TestSparseRecordingWeighsCapacity(t *testing.T) {
	params := DefaultParameters()
	params.AutoTune, params.BlockSizeTokens = false, 16
	a, b := benchPrompt(100<<10, 7), benchPrompt(100<<10, 8)
	n := len(hashPrompt(a, 16, 1<<30))
	pod := newEP("pod", &fwkdl.Metrics{CacheBlockSize: 16, CacheNumBlocks: n + n/2})
	params.AutoTune = true
	p := New("p", params, nil)
	for _, r := range []*fwksched.LLMRequest{a, b, a} {
		if err := p.PrepareRequestData(context.Background(), r, []fwksched.Endpoint{pod}); err != nil {
			t.Fatal(err)
		}
		p.PreRequest(context.Background(), r, result("decode", map[string]*ep{"decode": pod}))
		p.Wait()
	}
	// a, then b (evicts most of a: 1.5 prompts fit), then a again: b's blocks were the most
	// recent when a arrived, so a matched only what survived of it.
	if got := pod.info().MatchBlocks(); got >= n {
		t.Fatalf("a matched %d of %d blocks after b filled the LRU", got, n)
	}
}

// The index forgets a prefix's tail before its head, as the engines do (vLLM frees a request's
// blocks tail first): one eviction costs a pod the last block of a prompt, not the match of
// the whole prompt. GIE's order evicted the head and forgot prefixes the pod still held.
func TestIndexEvictsTailFirst(t *testing.T) {
	s := serverID{Namespace: "ns", Name: "pod"}
	x := newIndex(3)
	x.add([]blockHash{1, 2, 3}, s, 3, false)
	x.add([]blockHash{9}, s, 3, false)
	if got := x.matchLongestPrefix([]blockHash{1, 2, 3})[s]; got != 2 {
		t.Fatalf("after one eviction the prompt matches %d blocks, want 2 (its head kept)", got)
	}
	if got := x.matchLongestPrefix([]blockHash{9})[s]; got != 1 {
		t.Fatalf("the newest prompt matches %d blocks, want 1", got)
	}
}
