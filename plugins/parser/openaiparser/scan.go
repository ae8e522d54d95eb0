package openaiparser

import (
	"bytes"
	"encoding/binary"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// maxDepth is encoding/json's nesting limit: 10000 nested arrays/objects are accepted, 10001
// are a syntax error.
const maxDepth = 10000

// scanner walks a JSON document once, validating it against encoding/json's grammar while the
// decoder pulls out the fields plugins read. Positions are byte offsets into b.
type scanner struct {
	b     []byte
	i     int
	depth int  // open containers around s.i
	bad   bool // a syntax error was seen; everything after it is meaningless
	// ascii: the last string str scanned has no byte >= 0x80, so its text is valid UTF-8
	// without a second pass over it (a 220 KB prompt with escapes in it: one pass fewer).
	ascii bool
}

// strClass flags the bytes a string scan must stop at: the closing quote, a backslash, and
// control characters (which JSON forbids inside strings); high bytes are only noted.
var strClass = func() (t [256]uint8) {
	for c := 0; c < 0x20; c++ {
		t[c] = 1
	}
	t['"'], t['\\'] = 1, 1
	for c := 0x80; c < 0x100; c++ {
		t[c] = 2
	}
	return t
}()

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next non-space byte (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) fail() bool {
	s.bad = true
	return false
}

// str validates the string at s.i (which must be '"') and returns its token span and whether
// it holds escapes or non-ASCII bytes (the cases where the text is not a plain copy).
func (s *scanner) str() (start, end int, plain bool, ok bool) {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	b := s.b
	start = s.i
	j := s.i + 1
	if q := bytes.IndexByte(b[j:], '"'); q >= longString {
		return s.strLong()
	}
	var high uint8
	var highWord uint64
	for {
		// Eight bytes at a time while none is a quote, a backslash or a control byte (the
		// usual has-less/has-zero bit tricks: exact about whether such a byte exists).
		for j+8 <= len(b) {
			w := binary.LittleEndian.Uint64(b[j:])
			q, bs := w^(lsb*'"'), w^(lsb*'\\')
			if ((w-lsb*0x20)&^w|(q-lsb)&^q|(bs-lsb)&^bs)&msb != 0 {
				break
			}
			highWord |= w & msb
			j += 8
		}
		for j < len(b) && strClass[b[j]] != 1 {
			high |= strClass[b[j]]
			j++
		}
		if j >= len(b) {
			return 0, 0, false, s.fail()
		}
		switch c := b[j]; {
		case c == '"':
			s.i = j + 1
			s.ascii = high&2 == 0 && highWord == 0
			return start, j + 1, high == 0 && highWord == 0, true
		case c == '\\':
			high |= 4
			if j+1 >= len(b) {
				return 0, 0, false, s.fail()
			}
			switch b[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) || !isHex(b[j+5]) {
					return 0, 0, false, s.fail()
				}
				j += 6
			default:
				return 0, 0, false, s.fail()
			}
		default: // control character
			return 0, 0, false, s.fail()
		}
	}
}

// longString is the distance to the next quote from which str hands a string to strLong.
const longString = 256

// strLong is str for a long string (a prompt): a pass that stops at every escape costs more
// than one that does not, when escapes are sparse ("\n" every line of a document). It finds
// the closing quote and the escapes with the runtime's vector byte search, validating each
// escape as str does, then checks the whole span for control and high bytes a word at a time
// without stopping.
func (s *scanner) strLong() (start, end int, plain bool, ok bool) {
	b := s.b
	start = s.i
	j := start + 1
	escaped := false
	for {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			return 0, 0, false, s.fail()
		}
		q += j
		// The escapes before q; one of them may swallow the quote at q (\") and move j past it.
		for j < q {
			k := bytes.IndexByte(b[j:q], '\\')
			if k < 0 {
				j = q
				break
			}
			k += j
			escaped = true
			if k+1 >= len(b) {
				return 0, 0, false, s.fail()
			}
			switch b[k+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j = k + 2
			case 'u':
				if k+6 > len(b) || !isHex(b[k+2]) || !isHex(b[k+3]) || !isHex(b[k+4]) || !isHex(b[k+5]) {
					return 0, 0, false, s.fail()
				}
				j = k + 6
			default:
				return 0, 0, false, s.fail()
			}
		}
		if j == q {
			break // q is the closing quote
		}
	}
	ctl, high := spanClass(b[start+1 : j])
	if ctl {
		return 0, 0, false, s.fail()
	}
	s.i = j + 1
	s.ascii = !high
	return start, j + 1, !high && !escaped, true
}

// spanClass reports whether p holds a control byte (< 0x20) and whether it holds a byte >= 0x80.
func spanClass(p []byte) (ctl, high bool) {
	const lsb, msb = 0x0101010101010101, 0x8080808080808080
	var c, h uint64
	for ; len(p) >= 32; p = p[32:] {
		w0, w1 := binary.LittleEndian.Uint64(p[0:8]), binary.LittleEndian.Uint64(p[8:16])
		w2, w3 := binary.LittleEndian.Uint64(p[16:24]), binary.LittleEndian.Uint64(p[24:32])
		c |= (w0-lsb*0x20)&^w0 | (w1-lsb*0x20)&^w1 | (w2-lsb*0x20)&^w2 | (w3-lsb*0x20)&^w3
		h |= w0 | w1 | w2 | w3
	}
	for _, b := range p {
		ctl = ctl || b < 0x20
		high = high || b >= 0x80
	}
	return ctl || c&msb != 0, high || h&msb != 0
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// number validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? at s.i.
func (s *scanner) number() bool {
	b, j := s.b, s.i
	if j < len(b) && b[j] == '-' {
		j++
	}
	switch {
	case j < len(b) && b[j] == '0':
		j++
	case j < len(b) && '1' <= b[j] && b[j] <= '9':
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
	default:
		return s.fail()
	}
	if j < len(b) && b[j] == '.' {
		j++
		if j >= len(b) || b[j] < '0' || b[j] > '9' {
			return s.fail()
		}
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		if j >= len(b) || b[j] < '0' || b[j] > '9' {
			return s.fail()
		}
		for j < len(b) && '0' <= b[j] && b[j] <= '9' {
			j++
		}
	}
	s.i = j
	return true
}

func (s *scanner) literal(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return s.fail()
	}
	s.i += len(word)
	return true
}

// scalar validates a string, number or literal at s.i (after spaces).
func (s *scanner) scalar(c byte) bool {
	switch {
	case c == '"':
		_, _, _, ok := s.str()
		return ok
	case c == '-' || '0' <= c && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	}
	return s.fail()
}

// skip validates and steps over one value, iteratively so that deep nesting costs no stack.
func (s *scanner) skip() bool {
	var arr [64]byte
	stack := arr[:0] // closing byte of each open container
	for {
		c := s.peek()
		switch c {
		case '{', '[':
			s.i++
			if s.depth+len(stack)+1 > maxDepth {
				return s.fail()
			}
			if c == '{' {
				stack = append(stack, '}')
			} else {
				stack = append(stack, ']')
			}
			if s.peek() == stack[len(stack)-1] {
				s.i++
				stack = stack[:len(stack)-1]
				break
			}
			if c == '{' && !s.key() {
				return false
			}
			continue // the first member's value
		default:
			if !s.scalar(c) {
				return false
			}
		}
		// A value ended: close containers until one needs another member.
		for {
			if len(stack) == 0 {
				return true
			}
			c := s.peek()
			if c == ',' {
				s.i++
				if stack[len(stack)-1] == '}' && !s.key() {
					return false
				}
				break
			}
			if c != stack[len(stack)-1] {
				return s.fail()
			}
			s.i++
			stack = stack[:len(stack)-1]
		}
	}
}

// key validates `"name" :` at s.i and returns nothing; used where the name does not matter.
func (s *scanner) key() bool {
	if s.peek() != '"' {
		return s.fail()
	}
	if _, _, _, ok := s.str(); !ok {
		return false
	}
	if s.peek() != ':' {
		return s.fail()
	}
	s.i++
	return true
}

// members iterates the object at s.i, calling f with each key token (quotes included) once the
// scanner stands on its value; f must consume the value. It returns false on a syntax error.
func (s *scanner) members(f func(key []byte, plain bool) bool) bool {
	if open, ok := s.enter('{', '}'); !open {
		return ok
	}
	for {
		if s.peek() != '"' {
			return s.fail()
		}
		ks, ke, plain, ok := s.str()
		if !ok {
			return false
		}
		if s.peek() != ':' {
			return s.fail()
		}
		s.i++
		s.ws()
		if !f(s.b[ks:ke], plain) {
			return false
		}
		if more, ok := s.next('}'); !more {
			return ok
		}
	}
}

// elements iterates the array at s.i, calling f(i) with the scanner on each element.
func (s *scanner) elements(f func(i int) bool) bool {
	if open, ok := s.enter('[', ']'); !open {
		return ok
	}
	for n := 0; ; n++ {
		s.ws()
		if !f(n) {
			return false
		}
		if more, ok := s.next(']'); !more {
			return ok
		}
	}
}

// enter steps into the container at s.i, which must start with opener. It reports opened when
// the container has a first member or element to read; otherwise ok tells an empty container
// (stepped over) from a syntax error.
func (s *scanner) enter(opener, closer byte) (opened, ok bool) {
	if s.peek() != opener {
		return false, s.fail()
	}
	s.i++
	s.depth++
	if s.depth > maxDepth {
		return false, s.fail()
	}
	if s.peek() == closer {
		s.i++
		s.depth--
		return false, true
	}
	return true, true
}

// next steps over the comma after a member or element and reports more; at the container's
// close it steps out of it, and ok says whether that close (or a syntax error) ended it.
func (s *scanner) next(closer byte) (more, ok bool) {
	switch s.peek() {
	case ',':
		s.i++
		return true, true
	case closer:
		s.i++
		s.depth--
		return false, true
	}
	return false, s.fail()
}

// value validates and returns the span of the value at s.i.
func (s *scanner) value() ([]byte, bool) {
	s.ws()
	start := s.i
	if !s.skip() {
		return nil, false
	}
	return s.b[start:s.i], true
}

// aliasMin is the length from which unquote returns a string sharing the body's bytes instead
// of a copy: prompts and message contents, which live as long as the request does. Shorter
// strings (model names, roles, tool names) are copied, so that a value a plugin or a metric
// label keeps for longer never pins a whole request body in memory.
const aliasMin = 1024

// view returns b as a string: shared with the body from aliasMin bytes on (the request path
// never modifies a body it has parsed; see the package documentation), a copy below.
func view(b []byte) string {
	if len(b) < aliasMin {
		return string(b)
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// unquote decodes a validated string token exactly as encoding/json does: escapes, surrogate
// pairs (a lone or mismatched surrogate becomes U+FFFD) and invalid UTF-8 (U+FFFD per bad
// byte). plain reports that the token has neither escapes nor non-ASCII bytes.
func unquote(tok []byte, plain bool) string { return unquoteText(tok, plain, false) }

// unquoteText is unquote for a token known to hold only ASCII bytes when ascii is set (the
// scanner saw none >= 0x80), which is then valid UTF-8 without a check.
func unquoteText(tok []byte, plain, ascii bool) string {
	inner := tok[1 : len(tok)-1]
	if plain {
		return view(inner)
	}
	next := bytes.IndexByte(inner, '\\')
	// Escapes are ASCII, so no character spans one: the whole token is valid UTF-8 exactly
	// when every run between escapes is, and one check covers them all.
	valid := ascii || utf8.Valid(inner)
	if next < 0 && valid {
		return view(inner)
	}
	// A builder: its buffer is not zeroed before the copies fill it, and String takes it over.
	var out strings.Builder
	out.Grow(len(inner))
	for r := 0; ; {
		// The run up to the next escape: one copy when the token is valid UTF-8 (the usual
		// case), else rune by rune with U+FFFD for each invalid byte.
		end := len(inner)
		if next >= 0 {
			end = r + next
		}
		if run := inner[r:end]; valid {
			out.Write(run)
		} else {
			for k := 0; k < len(run); {
				rr, size := utf8.DecodeRune(run[k:])
				out.WriteRune(rr)
				k += size
			}
		}
		r = end
		if r == len(inner) {
			break
		}
		step := 2
		switch e := inner[r+1]; e {
		case 'b':
			out.WriteByte('\b')
		case 'f':
			out.WriteByte('\f')
		case 'n':
			out.WriteByte('\n')
		case 'r':
			out.WriteByte('\r')
		case 't':
			out.WriteByte('\t')
		case 'u':
			rr := getu4(inner[r:])
			step = 6
			if utf16.IsSurrogate(rr) {
				rr = utf16.DecodeRune(rr, getu4(inner[r+6:]))
				if rr != unicode.ReplacementChar {
					step = 12 // a valid pair
				}
			}
			out.WriteRune(rr)
		default: // '"', '\\', '/'
			out.WriteByte(e)
		}
		r += step
		next = bytes.IndexByte(inner[r:], '\\')
	}
	return out.String()
}

// getu4 decodes \uXXXX at the start of s, or returns -1.
func getu4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// foldInto appends in with encoding/json's key folding to dst: struct fields match keys
// case-insensitively (with Unicode simple folding, so "ſ" matches "s" and the Kelvin sign
// matches "k").
func foldInto(dst, in []byte) []byte {
	for i := 0; i < len(in); {
		c := in[i]
		if c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			dst = append(dst, c)
			i++
			continue
		}
		r, n := utf8.DecodeRune(in[i:])
		dst = utf8.AppendRune(dst, foldRune(r))
		i += n
	}
	return dst
}

// foldRune returns the smallest rune of r's simple case-folding orbit.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}
