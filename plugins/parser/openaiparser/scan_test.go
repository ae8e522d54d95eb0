package openaiparser

import (
	"encoding/json"
	"strings"
	"testing"
	"unsafe"
)

// TestScannerStringsAtEveryOffset puts each byte class the word-at-a-time loops must notice
// (quote, backslash escapes, control bytes, UTF-8 and invalid bytes) at every position of a
// string longer than two words, short and long (strLong's path), with and without bytes after
// it, and compares validity and the decoded text with encoding/json.
func TestScannerStringsAtEveryOffset(t *testing.T) {
	inserts := []string{`\"`, `\\`, `\/`, `\n`, `\u00e9`, `\ud83d\ude00`, `\ud800`, "\x01", "\x1f", "\x7f", "é", "\xff", "\xe2\x82", `\x`, `\u12`, `"`,
		`\n` + "\xff", "é" + `\t`, "\xe2" + `\u00e9`}
	heads := []string{"", "", strings.Repeat(`a line of a long prompt\n`, 12), strings.Repeat("plain words ", 30)}
	tails := []string{"ABCDEFGHIJKLMNOPQRST", "", "ABCDEFGHIJKLMNOPQRST", ""}
	for v, head := range heads {
		for _, ins := range append(inserts, `\`, `\\\`, `\u`) {
			for pos := 0; pos <= 20; pos++ {
				inner := append([]byte(head), "abcdefghijklmnopqrstuvwx"[:pos]...)
				inner = append(inner, ins...)
				inner = append(inner, tails[v]...)
				doc := append(append([]byte(`"`), inner...), '"')
				s := scanner{b: doc}
				start, end, plain, ok := s.str()
				ok = ok && end == len(doc)
				if ok != json.Valid(doc) {
					t.Fatalf("%q at %d (head %d): scanner valid=%v, encoding/json %v", ins, pos, v, ok, !ok)
				}
				if !ok {
					continue
				}
				var want string
				if err := json.Unmarshal(doc, &want); err != nil {
					t.Fatal(err)
				}
				if got := unquote(doc[start:end], plain); got != want {
					t.Fatalf("%q at %d: unquote %q, want %q", ins, pos, got, want)
				}
				// The scanner's ASCII note lets unquote skip its UTF-8 check: it must be exact.
				if ascii := !strings.ContainsFunc(string(inner), func(r rune) bool { return r >= 0x80 }); s.ascii != ascii {
					t.Fatalf("%q at %d: scanner ascii=%v, want %v", ins, pos, s.ascii, ascii)
				}
				if got := unquoteText(doc[start:end], plain, s.ascii); got != want {
					t.Fatalf("%q at %d: unquoteText %q, want %q", ins, pos, got, want)
				}
			}
		}
	}
}

// TestUnquoteSharesOnlyLongStrings: long strings without escapes are views of the body, every
// other string a copy, and all of them decode as encoding/json decodes them.
func TestUnquoteSharesOnlyLongStrings(t *testing.T) {
	long := strings.Repeat("a prompt of many words ", 60) // > aliasMin
	cases := []struct {
		name   string
		inner  string
		shared bool
	}{
		{"short ASCII", "meta-llama/Llama-3.1-8B-Instruct", false},
		{"short UTF-8", "café", false},
		{"long ASCII", long, true},
		{"long UTF-8", long + "café ✓", true},
		{"long with escapes", long + `\n\"quoted\" \u00e9\ud83d\ude00` + long, false},
		{"long invalid UTF-8", long + "\xff\xe2\x82" + long, false},
		{"long escapes and invalid UTF-8", long + "\xff" + `\t\ud800\n` + "\xc3" + long, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			doc := []byte(`"` + tc.inner + `"`)
			s := scanner{b: doc}
			start, end, plain, ok := s.str()
			if !ok {
				t.Fatal("scanner refused the string")
			}
			got := unquote(doc[start:end], plain)
			var want string
			if err := json.Unmarshal(doc, &want); err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("unquote = %q, want %q", got, want)
			}
			p := uintptr(unsafe.Pointer(unsafe.StringData(got)))
			base := uintptr(unsafe.Pointer(&doc[0]))
			if shared := p >= base && p < base+uintptr(len(doc)); shared != tc.shared {
				t.Fatalf("shares the body: %v, want %v", shared, tc.shared)
			}
		})
	}
}

// BenchmarkStrPrompt scans and decodes a 220 KB prompt string shaped as pdgate-bench epp's
// (words, a line break every 12 words: an escape every ~70 bytes).
func BenchmarkStrPrompt(b *testing.B) {
	words := strings.Fields("the of and to in is that for on with as by this data model request prefill decode cache")
	var sb strings.Builder
	for i := 1; sb.Len() < 220<<10; i++ {
		sb.WriteString(words[i%len(words)])
		if i%12 == 0 {
			sb.WriteString("\n")
		} else {
			sb.WriteByte(' ')
		}
	}
	doc, _ := json.Marshal(sb.String())
	b.ReportAllocs()
	for b.Loop() {
		s := scanner{b: doc}
		start, end, plain, ok := s.str()
		if !ok || len(unquoteText(doc[start:end], plain, s.ascii)) != sb.Len() {
			b.Fatal("scan failed")
		}
	}
}
