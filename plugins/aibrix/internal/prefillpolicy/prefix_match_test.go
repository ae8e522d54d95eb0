package prefillpolicy

import (
	"math/rand"
	"reflect"
	"testing"
)

// matchReference is the straightforward definition of Match: a pod's score is the share of
// leading blocks it holds contiguously from the first.
func matchReference(t *refTable, hashes []uint64) map[string]float64 {
	out := map[string]float64{}
	for id := range t.holders {
		if !t.has(hashes[0], id) {
			continue
		}
		n := 0
		for _, h := range hashes {
			if !t.has(h, id) {
				break
			}
			n++
		}
		out[t.names[id]] = float64(n * 100 / len(hashes))
	}
	return out
}

// TestRefTableMatchAgreesWithReference checks the reference model's binary-searching Match against the
// reference on random tables with pods holding prefixes of different lengths, of prompts that
// branch from the asked one at random blocks (chained hashes: a branch shares only the blocks
// before it), over generations that rotate and drop.
func TestRefTableMatchAgreesWithReference(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for round := 0; round < 200; round++ {
		// Small capacities spread the entries over both generations (and drop some).
		pt := newRefTable(4, []int{1 << 20, 24, 40}[round%3])
		blocks := 1 + rng.Intn(12)
		hashes := make([]uint64, blocks)
		for i := range hashes {
			hashes[i] = rng.Uint64()
		}
		for p := 0; p < 1+rng.Intn(10); p++ {
			held := append([]uint64(nil), hashes[:rng.Intn(blocks+1)]...)
			if rng.Intn(3) == 0 && len(held) > 1 { // another prompt, branching at block k
				k := rng.Intn(len(held))
				for i := k; i < len(held); i++ {
					held[i] = rng.Uint64()
				}
			}
			pod := string(rune('a' + rng.Intn(6)))
			pt.Add(pod, held)
		}
		if got, want := pt.Match(hashes), matchReference(pt, hashes); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: Match %v, reference %v", round, got, want)
		}
	}
}
