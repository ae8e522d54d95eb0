package prefillpolicy

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTokensIsRuneCount: the word-at-a-time count equals utf8.RuneCountInString for ASCII,
// multi-byte and invalid UTF-8 at every alignment.
func TestTokensIsRuneCount(t *testing.T) {
	inserts := []string{"", "a", "é", "✓", "😀", "\xff", "\xe2\x82", "\x80\x80", "é\xc3"}
	for _, ins := range inserts {
		for pos := 0; pos <= 17; pos++ {
			s := strings.Repeat("x", pos) + ins + strings.Repeat("y", 9) + ins
			if got, want := Tokens(s), utf8.RuneCountInString(s); got != want {
				t.Errorf("Tokens(%q) = %d, want %d", s, got, want)
			}
		}
	}
}
