package prefillpolicy

import "testing"

// The reference model's Hashes must agree with the spelled-out chain (hashesReference) on every input, valid UTF-8
// or not: its fast path copies valid blocks as bytes.
func FuzzHashesMatchReference(f *testing.F) {
	for _, s := range []string{"", "abcd", "héllo wörld, 東京 caf\u00e9", "ab\xffcd\xfe\xfd", "\xf0\x9f\x98\x80 emoji and text"} {
		f.Add(s, uint8(4))
	}
	f.Fuzz(func(t *testing.T, prompt string, bs uint8) {
		blockSize := int(bs%16) + 1
		tbl := newRefTable(blockSize, 16)
		got, want := tbl.Hashes(prompt), hashesReference(blockSize, prompt)
		if len(got) != len(want) {
			t.Fatalf("%d hashes, want %d", len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("block %d differs", i)
			}
		}
	})
}
