package prefixproducer

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// referenceHashes is the README's definition written out over the whole byte stream: block i's
// hash is xxhash64(block i ‖ hash(i-1) as 8 little-endian bytes), hash(-1) =
// xxhash64(model ‖ salt), whole blocks only, at most maxBlocks.
func referenceHashes(model, salt, stream string, size, maxBlocks int) []blockHash {
	prev := blockHash(xxhash.Sum64String(model + salt))
	var out []blockHash
	for i := 0; i+size <= len(stream) && len(out) < maxBlocks; i += size {
		b := binary.LittleEndian.AppendUint64([]byte(stream[i:i+size]), uint64(prev))
		prev = blockHash(xxhash.Sum64(b))
		out = append(out, prev)
	}
	return out
}

// TestHashPromptDefinition pins the block hashes to their definition, whatever pieces the
// prompt's bytes arrive in: a change to how blocks are gathered or hashed must not change a
// hash, or a running index would stop matching the prompts it holds.
func TestHashPromptDefinition(t *testing.T) {
	long := strings.Repeat("the quick brown fox jumps over the lazy dog. ", 40)
	structured := chat("m")
	structured.Body.ChatCompletions.Messages = []fwksched.Message{{Role: "user", Content: fwksched.Content{
		Structured: []fwksched.ContentBlock{{Type: "text", Text: long[:7]}, {Type: "text", Text: long[7:]}}}}}
	salted := chat("m", "user", long)
	salted.Body.ChatCompletions.CacheSalt = "salt"
	tests := []struct {
		name      string
		req       *fwksched.LLMRequest
		salt      string
		stream    string
		bs, max   int
		wantCount int
	}{
		{name: "one message, 64-byte blocks", req: chat("m", "user", long), stream: "user\x00" + long + "\x00", bs: 16, max: 1 << 20, wantCount: (6 + len(long)) / 64},
		{name: "messages across block edges", req: chat("m", "system", "be brief", "user", long), stream: "system\x00be brief\x00user\x00" + long + "\x00", bs: 4, max: 1 << 20, wantCount: (22 + len(long)) / 16},
		{name: "text blocks", req: structured, stream: "user\x00" + long[:7] + "\x00" + long[7:] + "\x00\x00", bs: 16, max: 1 << 20, wantCount: (7 + len(long)) / 64},
		{name: "cache salt", req: salted, salt: "salt", stream: "user\x00" + long + "\x00", bs: 16, max: 1 << 20, wantCount: (6 + len(long)) / 64},
		{name: "completion", req: completion("m", long), stream: long, bs: 16, max: 1 << 20, wantCount: len(long) / 64},
		{name: "block cap", req: chat("m", "user", long), stream: "user\x00" + long + "\x00", bs: 16, max: 3, wantCount: 3},
		{name: "odd block size", req: chat("m", "user", long), stream: "user\x00" + long + "\x00", bs: 5, max: 1 << 20, wantCount: (6 + len(long)) / 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := hashPrompt(tt.req, tt.bs, tt.max)
			want := referenceHashes("m", tt.salt, tt.stream, tt.bs*CharactersPerToken, tt.max)
			if len(got) != tt.wantCount || len(want) != tt.wantCount {
				t.Fatalf("%d blocks (reference %d), want %d", len(got), len(want), tt.wantCount)
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("block %d: hash %x, want %x", i, got[i], want[i])
				}
			}
		})
	}
}

// BenchmarkHashPrompt is the hashing of a 220 KB chat prompt alone (PrepareRequestData's
// largest part before the index lookups).
func BenchmarkHashPrompt(b *testing.B) {
	r := benchPrompt(220<<10, 1)
	b.ReportAllocs()
	for b.Loop() {
		_ = hashPrompt(r, 16, 1<<20)
	}
}
