package fastparser

import (
	"encoding/json"
	"testing"
)

// TestScannerStringsAtEveryOffset puts each byte class the word-at-a-time loops must notice
// (quote, backslash escapes, control bytes, UTF-8 and invalid bytes) at every position of a
// string longer than two words, and compares validity and the decoded text with encoding/json.
func TestScannerStringsAtEveryOffset(t *testing.T) {
	inserts := []string{`\"`, `\\`, `\/`, `\n`, `\u00e9`, `\ud83d\ude00`, `\ud800`, "\x01", "\x1f", "\x7f", "é", "\xff", "\xe2\x82", `\x`, `\u12`, `"`}
	for _, ins := range inserts {
		for pos := 0; pos <= 20; pos++ {
			inner := []byte("abcdefghijklmnopqrstuvwx")[:pos]
			inner = append(inner, ins...)
			inner = append(inner, "ABCDEFGHIJKLMNOPQRST"...)
			doc := append(append([]byte(`"`), inner...), '"')
			s := scanner{b: doc}
			start, end, plain, ok := s.str()
			ok = ok && end == len(doc)
			if ok != json.Valid(doc) {
				t.Fatalf("%q at %d: scanner valid=%v, encoding/json %v", ins, pos, ok, !ok)
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
		}
	}
}
