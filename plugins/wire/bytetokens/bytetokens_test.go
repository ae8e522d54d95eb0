package bytetokens

import (
	"slices"
	"strings"
	"testing"
)

// TestPacker: text packs into little-endian 4-byte words across calls, whatever the pieces'
// lengths; Flush pads the last word with zeros; Repeat starts on a word boundary.
func TestPacker(t *testing.T) {
	word := func(s string) uint32 {
		var b [4]byte
		copy(b[:], s)
		return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
	}
	cases := []struct {
		name string
		feed func(p *Packer)
		want []uint32
	}{
		{"empty", func(p *Packer) {}, nil},
		{"whole words", func(p *Packer) { p.Text("abcdefgh") }, []uint32{word("abcd"), word("efgh")}},
		{"padded tail", func(p *Packer) { p.Text("abcdef") }, []uint32{word("abcd"), word("ef")}},
		{"pieces across words", func(p *Packer) { p.Text("a"); p.Bytes([]byte("bcdef")); p.Text("gh"); p.Text("i") },
			[]uint32{word("abcd"), word("efgh"), word("i")}},
		{"chat message", func(p *Packer) { p.ChatMessage("user", "hi there") }, []uint32{word("user"), word("hi t"), word("here")}},
		{"grown first", func(p *Packer) { p.Grow(64); p.Text("abcdefghij") }, []uint32{word("abcd"), word("efgh"), word("ij")}},
		{"repeat flushes", func(p *Packer) { p.Text("ab"); p.Repeat(7, 3); p.Text("c") }, []uint32{word("ab"), 7, 7, 7, word("c")}},
	}
	long := strings.Repeat("a prompt of many words, é ✓ ", 500)
	var longWant []uint32
	for i := 0; i+4 <= len(long); i += 4 {
		longWant = append(longWant, word(long[i:i+4]))
	}
	if r := len(long) % 4; r != 0 {
		longWant = append(longWant, word(long[len(long)-r:]))
	}
	cases = append(cases, struct {
		name string
		feed func(p *Packer)
		want []uint32
	}{"long text after a pending byte", func(p *Packer) { p.Text(long[:1]); p.Bytes([]byte(long[1:])) }, longWant})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p Packer
			tc.feed(&p)
			p.Flush()
			if !slices.Equal(p.Tokens, tc.want) {
				t.Fatalf("tokens %x, want %x", p.Tokens, tc.want)
			}
		})
	}
}

// TestGrow: grow keeps the tokens, guarantees the room asked for, reuses the slice when it
// has that room and copies it otherwise (never sharing the old array, which the caller may
// still publish). Under -race, checkptr checks the view of the builder's buffer as tokens.
func TestGrow(t *testing.T) {
	for _, tc := range []struct {
		name          string
		len, cap, n   int
		wantSameArray bool
	}{
		{"nil, one token", 0, 0, 1, false},
		{"nil, a large prompt", 0, 0, 55_000, false},
		{"room enough", 3, 10, 7, true},
		{"one short", 3, 10, 8, false},
		{"full, small", 5, 5, 1, false},
		{"full, large", 60_000, 60_000, 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var old []uint32
			if tc.cap > 0 {
				old = make([]uint32, tc.len, tc.cap)
				for i := range old {
					old[i] = uint32(i*2654435761) | 1
				}
			}
			before := slices.Clone(old)
			got := grow(old, tc.n)
			if !slices.Equal(got, before) || len(got) != tc.len {
				t.Fatalf("grow changed the tokens: len %d, want %d", len(got), tc.len)
			}
			if cap(got)-len(got) < tc.n {
				t.Fatalf("room %d, want >= %d", cap(got)-len(got), tc.n)
			}
			if same := tc.cap > 0 && &got[:1][0] == &old[:1][0]; same != tc.wantSameArray {
				t.Fatalf("same array: %v, want %v", same, tc.wantSameArray)
			}
			if got = append(got, 42); got[tc.len] != 42 { // the room is usable, and writing it leaves the old array alone
				t.Fatal("append lost its token")
			}
			if tc.cap > 0 && !tc.wantSameArray && !slices.Equal(old, before) {
				t.Fatal("the old array changed")
			}
		})
	}
}

// TestPackedText: the bytes tokens were packed from, each message's padding included.
func TestPackedText(t *testing.T) {
	if !TextInOrder() {
		t.Skip("tokens do not hold their text in order on a big-endian machine")
	}
	var p Packer
	p.ChatMessage("user", "hello")
	p.ChatMessage("assistant", "hi")
	p.Flush()
	text, ok := PackedText(p.Tokens)
	if want := "userhello\x00\x00\x00assistanthi\x00"; !ok || text != want {
		t.Fatalf("PackedText = %q, %v; want %q", text, ok, want)
	}
	if text, ok := PackedText(nil); !ok || text != "" {
		t.Fatalf("PackedText(nil) = %q, %v", text, ok)
	}
}

// TestPackerGrowsAmortized: packing many short messages without a Grow reallocates the
// slice a logarithmic number of times, as append would, not once per message.
func TestPackerGrowsAmortized(t *testing.T) {
	var p Packer
	arrays := 0
	var last *uint32
	for range 10_000 {
		p.ChatMessage("user", "a short turn")
		if first := &p.Tokens[0]; first != last {
			arrays, last = arrays+1, first
		}
	}
	if arrays > 40 {
		t.Fatalf("%d arrays for 10,000 messages (%d tokens)", arrays, len(p.Tokens))
	}
}
