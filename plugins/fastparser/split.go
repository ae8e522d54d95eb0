package fastparser

import (
	"encoding/json"
	"errors"
	"unicode/utf8"
)

// member is one top-level key of a JSON object and the span of its value in the body.
type member struct {
	key   string
	value []byte
}

var errNotObject = errors.New("not a JSON object")

// splitObject returns the top-level members of a JSON object without decoding the values.
// body must already be valid JSON (the API decode validated it); the scan only tracks strings
// and nesting depth, which is far cheaper than decoding. Duplicate keys keep the last value,
// as encoding/json does.
func splitObject(body []byte) ([]member, error) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, errNotObject
	}
	i++
	var out []member
	for {
		i = skipSpace(body, i)
		if i < len(body) && body[i] == '}' {
			return out, nil
		}
		if i >= len(body) || body[i] != '"' {
			return nil, errNotObject
		}
		end := skipString(body, i)
		if end < 0 {
			return nil, errNotObject
		}
		key, err := unquoteKey(body[i:end])
		if err != nil {
			return nil, err
		}
		i = skipSpace(body, end)
		if i >= len(body) || body[i] != ':' {
			return nil, errNotObject
		}
		i = skipSpace(body, i+1)
		vend := skipValue(body, i)
		if vend < 0 {
			return nil, errNotObject
		}
		out = setMember(out, key, body[i:vend])
		i = skipSpace(body, vend)
		if i < len(body) && body[i] == ',' {
			i++
			continue
		}
		if i < len(body) && body[i] == '}' {
			return out, nil
		}
		return nil, errNotObject
	}
}

func setMember(ms []member, key string, v []byte) []member {
	for j := range ms {
		if ms[j].key == key {
			ms[j].value = v
			return ms
		}
	}
	return append(ms, member{key: key, value: v})
}

func unquoteKey(q []byte) (string, error) {
	inner := q[1 : len(q)-1]
	for _, c := range inner {
		if c == '\\' || c >= utf8.RuneSelf {
			// Escapes and non-ASCII (invalid UTF-8 becomes U+FFFD): decode as encoding/json does.
			var s string
			err := json.Unmarshal(q, &s)
			return s, err
		}
	}
	return string(inner), nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"', or -1.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipValue returns the index after the value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				e := skipString(b, j)
				if e < 0 {
					return -1
				}
				j = e - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	default:
		j := i
		for j < len(b) && b[j] != ',' && b[j] != '}' && b[j] != ']' && b[j] != ' ' && b[j] != '\t' && b[j] != '\n' && b[j] != '\r' {
			j++
		}
		return j
	}
}
