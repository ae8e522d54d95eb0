package openaiparser

import (
	"bytes"
	"errors"
	"io"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/pdgate/pdgate/plugins/lib/bodyjson"
)

// jtReader walks a body with a jsontext.Decoder that accepts exactly encoding/json's grammar
// (see bodyjson) while the decoder in decode.go pulls out the fields plugins read. jsontext
// validates every token it returns, so the walk is the validation; jtReader only remembers the
// first error and turns the token calls into the boolean style the field decoders use.
type jtReader struct {
	d    *jsontext.Decoder
	body []byte
	err  error // the first syntax error; everything after it is meaningless
}

func newJTReader(body []byte) *jtReader {
	return &jtReader{d: bodyjson.GetDecoder(body), body: body}
}

func (r *jtReader) release() {
	bodyjson.PutDecoder(r.d)
	r.d = nil
}

func (r *jtReader) fail(err error) bool {
	if r.err == nil {
		r.err = err
	}
	return false
}

// peek returns the kind of the next value ('{', '[', '"', '0', 'n', 't', 'f'), or 0 when the
// next read will fail.
func (r *jtReader) peek() jsontext.Kind { return r.d.PeekKind() }

// value reads (and validates) the next value and returns its bytes, a sub-slice of the body.
func (r *jtReader) value() ([]byte, bool) {
	v, err := r.d.ReadValue()
	if err != nil {
		return nil, r.fail(err)
	}
	return v, true
}

// skip validates and steps over the next value. ReadValue consumes a nested value in one
// recursive pass, which is cheaper than SkipValue's token-by-token walk.
func (r *jtReader) skip() bool {
	_, ok := r.value()
	return ok
}

// null consumes a null the caller has peeked.
func (r *jtReader) null() bool { return r.skip() }

// delim reads a '{', '}', '[' or ']' the caller expects.
func (r *jtReader) delim() bool {
	if _, err := r.d.ReadToken(); err != nil {
		return r.fail(err)
	}
	return true
}

// members iterates the object at the reader, calling f with each name token (quotes
// included, a sub-slice of the body) while the reader stands before its value; f must
// consume the value. It returns false on a syntax error.
func (r *jtReader) members(f func(name []byte) bool) bool {
	if !r.delim() {
		return false
	}
	for r.peek() != '}' {
		name, ok := r.value() // a peek error surfaces here
		if !ok || !f(name) {
			return false
		}
	}
	return r.delim()
}

// elements iterates the array at the reader, calling f(i) before each element; f must
// consume it.
func (r *jtReader) elements(f func(i int) bool) bool {
	if !r.delim() {
		return false
	}
	for n := 0; r.peek() != ']'; n++ {
		if r.err != nil || !f(n) {
			return false
		}
	}
	return r.delim()
}

// offset is the position just after the last token or value read.
func (r *jtReader) offset() int { return int(r.d.InputOffset()) }

// valueStart is the position of the value that follows the name just read (jsontext reports
// offsets after a token; the colon and spaces before the value are not part of it).
func (r *jtReader) valueStart() int {
	i := r.offset()
	for i < len(r.body) {
		switch r.body[i] {
		case ' ', '\t', '\n', '\r', ':':
			i++
		default:
			return i
		}
	}
	return i
}

// atEOF reports whether only spaces follow the top-level value.
func (r *jtReader) atEOF() bool {
	_, err := r.d.ReadToken()
	return r.err == nil && errors.Is(err, io.EOF)
}

// nameBytes returns a name token's text: the bytes between the quotes when there is no escape
// (invalid UTF-8 folds to U+FFFD either way), otherwise the unescaped name.
func jtNameBytes(tok []byte) []byte {
	inner := tok[1 : len(tok)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return inner
	}
	return []byte(bodyjson.Unquote(tok))
}
