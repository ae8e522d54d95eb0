package prefixproducer

import (
	"fmt"
	"math/rand/v2"
	"testing"

	k8stypes "k8s.io/apimachinery/pkg/types"
)

// BenchmarkIndexAddEvicting records distinct 220 KB prompts (3,456 blocks of 16 tokens) on a
// decode and a prefill server each, over 16 servers with GIE's default capacity: once the
// servers are full every request evicts as many blocks as it records, pdgate-bench epp's
// steady state (every body there is new to the index).
func BenchmarkIndexAddEvicting(b *testing.B) {
	const blocks = 3456
	rng := rand.New(rand.NewPCG(1, 2))
	prompts := make([][]blockHash, 256)
	for i := range prompts {
		prompts[i] = make([]blockHash, blocks)
		for j := range prompts[i] {
			prompts[i][j] = blockHash(rng.Uint64())
		}
	}
	servers := make([]serverID, 16)
	for i := range servers {
		servers[i] = k8stypes.NamespacedName{Namespace: "ns", Name: fmt.Sprint("pod-", i)}
	}
	x := newIndex(DefaultLRUCapacityPerServer)
	n := 0
	add := func() {
		h := prompts[n%len(prompts)]
		// A fresh first block per pass keeps every prompt new to the index.
		h[0] = blockHash(rng.Uint64())
		x.add(h, servers[n%8], 0, false)
		x.add(h, servers[8+n%8], 0, false)
		n++
	}
	for range 8 * 16 { // fill every server
		add()
	}
	b.ResetTimer()
	for b.Loop() {
		add()
	}
}
