package protocol

import "strings"

// IsConditionalDecode reports whether a Prefer header value (RFC 7240) asks for
// "if-available": tokens are split on ',', cut at ';', trimmed and compared
// case-insensitively. Several Prefer header values may be passed joined by ','.
func IsConditionalDecode(prefer string) bool {
	for _, tok := range strings.Split(prefer, ",") {
		if i := strings.IndexByte(tok, ';'); i >= 0 {
			tok = tok[:i]
		}
		if strings.EqualFold(strings.TrimSpace(tok), "if-available") {
			return true
		}
	}
	return false
}
