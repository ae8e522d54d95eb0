package openaiparser

import (
	"errors"
	"strconv"
	"unsafe"
)

// errNumberRange is what anyValue reports for a number a float64 cannot hold, where
// encoding/json fails the whole decode too.
var errNumberRange = errors.New("number out of float64 range")

// anyValue decodes the value at s.i as encoding/json decodes it into an any: objects as
// map[string]any (a repeated key keeps its last value), arrays as []any (empty, not nil),
// strings unquoted as unquote does, numbers as float64, true, false and nil. In map mode the
// payload's small top-level values (max_tokens, temperature, a 1 KB chat's messages) went
// through json.Unmarshal one by one, each a validating pass, a reflective decode and its
// allocations: 12 % of the recommended config's EPP instructions at 1 KB. The scanner has
// validated the body already, so one pass builds the same values.
func (s *scanner) anyValue() (any, error) {
	switch c := s.peek(); c {
	case '{':
		m := map[string]any{}
		var err error
		ok := s.members(func(key []byte, plain bool) bool {
			ascii := s.ascii
			var v any
			if v, err = s.anyValue(); err != nil {
				return false
			}
			m[unquoteText(key, plain, ascii)] = v
			return true
		})
		return m, scanErr(ok, err)
	case '[':
		a := []any{}
		var err error
		ok := s.elements(func(int) bool {
			var v any
			if v, err = s.anyValue(); err != nil {
				return false
			}
			a = append(a, v)
			return true
		})
		return a, scanErr(ok, err)
	case '"':
		start, end, plain, ok := s.str()
		if !ok {
			return nil, errSyntax
		}
		return unquoteText(s.b[start:end], plain, s.ascii), nil
	case 't':
		return true, literalErr(s.literal("true"))
	case 'f':
		return false, literalErr(s.literal("false"))
	case 'n':
		return nil, literalErr(s.literal("null"))
	}
	start := s.i
	if !s.number() {
		return nil, errSyntax
	}
	// The digits are only read: a view, not a copy (ParseFloat's error would keep it).
	b := s.b[start:s.i]
	f, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(b), len(b)), 64)
	if err != nil {
		return nil, errNumberRange
	}
	return f, nil
}

func literalErr(ok bool) error {
	if !ok {
		return errSyntax
	}
	return nil
}

func scanErr(ok bool, err error) error {
	if err != nil {
		return err
	}
	if !ok {
		return errSyntax
	}
	return nil
}
