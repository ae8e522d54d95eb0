package prefillpolicy

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// choices is where a differential run takes its decisions from: a seeded generator, or a
// fuzzer's bytes.
type choices interface{ Intn(n int) int }

type fuzzChoices struct{ data []byte }

func (c *fuzzChoices) Intn(n int) int {
	if len(c.data) == 0 || n <= 1 {
		return 0
	}
	v := int(c.data[0])
	c.data = c.data[1:]
	if n > 256 && len(c.data) > 0 {
		v = v<<8 | int(c.data[0])
		c.data = c.data[1:]
	}
	return v % n
}

// pieces are what the differential prompts are made of: ASCII, 2-, 3- and 4-byte runes, U+FFFD
// itself, and invalid bytes (each one U+FFFD to AIBrix, whichever byte it is), including a
// multibyte rune's lead byte alone and a truncated rune.
var pieces = []string{"a", "b", "ab", "abcd", "é", "日", "😀", "\uFFFD", "\xff", "\xfe", "\xc3", "\xe6\x97", "\xf0\x9f\x98", "\x80"}

// diffPrompt builds a prompt that shares a random prefix of an earlier one (cut at any byte,
// even inside a rune) and goes on with random pieces.
func diffPrompt(c choices, earlier []string) string {
	var b strings.Builder
	if len(earlier) > 0 && c.Intn(4) != 0 {
		e := earlier[c.Intn(len(earlier))]
		b.WriteString(e[:c.Intn(len(e)+1)])
	}
	for range c.Intn(12) {
		b.WriteString(pieces[c.Intn(len(pieces))])
	}
	return b.String()
}

// runDifferential drives PrefixTable and the hash-chain reference with the same Adds, Forgets
// and Matches, and fails at the first step where a match, the entry count, the number of
// rotations or the pod index differ.
func runDifferential(t *testing.T, c choices, ops int) {
	blockSize := 1 + c.Intn(5)
	capacity := []int{2, 5, 16, 40, 100, 1 << 20}[c.Intn(6)]
	pt, ref := NewPrefixTable(blockSize, capacity), newRefTable(blockSize, capacity)
	var prompts []string
	pods := []string{"a", "b", "c", "d", "e"}
	check := func(op int, what, prompt string) {
		t.Helper()
		got, want := pt.Match(pt.Prompt(prompt)), ref.Match(ref.Hashes(prompt))
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("block %d, capacity %d, op %d (%s): Match(%q) = %v, reference %v", blockSize, capacity, op, what, prompt, got, want)
		}
	}
	for op := range ops {
		var what string
		switch r := c.Intn(20); {
		case r < 12:
			p := diffPrompt(c, prompts)
			pod := pods[c.Intn(len(pods))]
			what = fmt.Sprintf("Add(%s, %q)", pod, p)
			check(op, "before "+what, p)
			pt.Add(pod, pt.Prompt(p))
			ref.Add(pod, ref.Hashes(p))
			prompts = append(prompts, p)
		case r < 13:
			pod := pods[c.Intn(len(pods))]
			what = "Forget(" + pod + ")"
			pt.Forget(pod)
			ref.Forget(pod)
		default:
			p := diffPrompt(c, prompts)
			what = fmt.Sprintf("Match(%q)", p)
			check(op, what, p)
		}
		if pt.Len() != ref.Len() || pt.rotations != ref.rotations {
			t.Fatalf("block %d, capacity %d, op %d (%s): Len %d rotations %d, reference %d %d",
				blockSize, capacity, op, what, pt.Len(), pt.rotations, ref.Len(), ref.rotations)
		}
		// Ids are reused in map order: compare the index by name.
		gotHolders, wantHolders := byName(pt.holders, pt.names), byName(ref.holders, ref.names)
		gotRetired, wantRetired := epochs(pt.retired), epochs(ref.retired)
		if !reflect.DeepEqual(gotHolders, wantHolders) || !reflect.DeepEqual(gotRetired, wantRetired) || len(pt.ids) != len(ref.ids) {
			t.Fatalf("op %d (%s): holders %v retired %v, reference %v %v", op, what, gotHolders, gotRetired, wantHolders, wantRetired)
		}
		// Every prompt recorded so far, and each one's prefixes cut anywhere.
		for _, p := range prompts[max(0, len(prompts)-8):] {
			check(op, what, p)
			check(op, what, p[:c.Intn(len(p)+1)])
		}
	}
}

func byName(holders map[uint32]uint64, names []string) map[string]uint64 {
	out := map[string]uint64{}
	for id, epoch := range holders {
		out[names[id]] = epoch
	}
	return out
}

func epochs(retired map[uint32]uint64) []uint64 {
	var out []uint64
	for _, epoch := range retired {
		out = append(out, epoch)
	}
	slices.Sort(out)
	return out
}

// TestPrefixTableAgreesWithHashChain checks the trie against the hash-chain table it replaced
// (prefix_ref_test.go) on random runs: prompts sharing prefixes and branching at random bytes,
// multibyte and invalid UTF-8, block sizes 1-5, five pods, capacities small enough to rotate
// and drop generations every few Adds, and Forget.
func TestPrefixTableAgreesWithHashChain(t *testing.T) {
	rounds := 200
	if testing.Short() {
		rounds = 50
	}
	for seed := range rounds {
		runDifferential(t, rand.New(rand.NewSource(int64(seed))), 150)
	}
}

// FuzzPrefixTableAgreesWithHashChain is the differential run with the fuzzer's bytes choosing
// every step.
func FuzzPrefixTableAgreesWithHashChain(f *testing.F) {
	f.Add([]byte("abcdefgh"))
	f.Add([]byte{3, 2, 0, 1, 5, 7, 9, 11, 0, 0, 4, 4, 13, 12, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte("\x00\x05\x01\x09\x02\x0a\x0b\x0c\x0d\x00\x01\x02\x03\x0e\x0f\x10\x11"))
	f.Fuzz(func(t *testing.T, data []byte) {
		runDifferential(t, &fuzzChoices{data: data}, 1+len(data)/3)
	})
}

// runeCount counts valid UTF-8 eight bytes at a time: it must agree with the standard library
// at every length and alignment.
func TestRuneCount(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for range 2000 {
		var b strings.Builder
		for range rng.Intn(30) {
			b.WriteString([]string{"a", "é", "日", "😀", "\uFFFD", "abcdefgh"}[rng.Intn(6)])
		}
		s := b.String()
		for i := range len(s) + 1 {
			if got, want := runeCount(s[i:]), utf8.RuneCountInString(s[i:]); utf8.ValidString(s[i:]) && got != want {
				t.Fatalf("runeCount(%q) = %d, want %d", s[i:], got, want)
			}
		}
	}
}
