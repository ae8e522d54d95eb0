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
