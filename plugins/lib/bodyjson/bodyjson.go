// Package bodyjson reads OpenAI-style request bodies with go-json-experiment's jsontext (the
// standard library's future encoding/json/v2 text layer) configured to accept exactly what
// encoding/json accepts, so that the EPP's request path and its parser agree with GIE's
// openai-parser (which uses encoding/json) on every body. It imports nothing from GIE.
//
// encoding/json (v1) accepts duplicate object names and invalid UTF-8 inside strings (decoded
// as U+FFFD per bad byte); jsontext rejects both by default, so every decoder built here
// allows them. Both limit nesting to 10,000 levels.
package bodyjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"
)

// v1Grammar makes jsontext accept what encoding/json accepts. A package-level slice, so that
// passing it to Reset allocates nothing.
var v1Grammar = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// decoders are reused across requests: a Decoder keeps its state-machine stacks, which would
// otherwise be reallocated for every body.
var decoders = sync.Pool{New: func() any { return new(jsontext.Decoder) }}

// GetDecoder returns a decoder over body with encoding/json's grammar. Because it reads from a
// bytes.Buffer, jsontext parses body in place: every value ReadValue returns is a sub-slice of
// body (not a copy) and stays valid as long as body does. Hand it back with PutDecoder.
func GetDecoder(body []byte) *jsontext.Decoder {
	d := decoders.Get().(*jsontext.Decoder)
	d.Reset(bytes.NewBuffer(body), v1Grammar...)
	return d
}

// empty is what a released decoder reads, so that the pool does not keep the last body alive.
var empty = bytes.NewBuffer(nil)

// PutDecoder returns d to the pool; d must not be used afterwards.
func PutDecoder(d *jsontext.Decoder) {
	d.Reset(empty)
	decoders.Put(d)
}

// Unquote decodes a JSON string token (quotes included) that a decoder from GetDecoder
// accepted, exactly as encoding/json decodes it into a string: escapes, surrogate pairs (a
// lone or mismatched surrogate becomes U+FFFD) and invalid UTF-8 (U+FFFD per bad byte).
func Unquote(tok []byte) string {
	inner := tok[1 : len(tok)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner) // the common case: one copy
	}
	// AppendUnquote's error only reports the U+FFFD substitutions encoding/json makes silently;
	// the token itself was validated by the decoder.
	out, _ := jsontext.AppendUnquote(make([]byte, 0, len(tok)), tok)
	// out is not touched again: hand its bytes to the string without another copy.
	return unsafe.String(unsafe.SliceData(out), len(out))
}

// Errors of ModelSpan beyond the decoder's syntax errors.
var (
	ErrNotObject      = errors.New("request body is not a JSON object")
	ErrNoModel        = errors.New(`request body has no top-level "model"`)
	ErrModelNotString = errors.New(`request body's top-level "model" is not a JSON string`)
)

// ModelSpan returns the top-level "model" of a JSON object body and the byte span of its
// string token: body[start:end] is the token with its quotes, so a rewritten model can be
// spliced in without re-encoding the rest of the body:
//
//	out := append(append(append(out, body[:start]...), quoted...), body[end:]...)
//
// The key is matched exactly after unescaping and the last one wins, as the director's and
// openai-parser's map lookups (encoding/json) read it; a splice therefore changes what every
// last-wins reader sees. The whole body is validated (one pass, values skipped, not decoded),
// so a malformed body is an error wrapping the decoder's SyntacticError.
func ModelSpan(body []byte) (model string, start, end int, err error) {
	d := GetDecoder(body)
	defer PutDecoder(d)
	if d.PeekKind() != '{' {
		if _, err := d.ReadValue(); err != nil {
			return "", 0, 0, fmt.Errorf("model span: %w", err)
		}
		return "", 0, 0, ErrNotObject
	}
	if _, err := d.ReadToken(); err != nil {
		return "", 0, 0, fmt.Errorf("model span: %w", err)
	}
	start, end = -1, -1
	for d.PeekKind() != '}' {
		name, err := d.ReadValue()
		if err != nil {
			return "", 0, 0, fmt.Errorf("model span: %w", err)
		}
		v, err := d.ReadValue()
		if err != nil {
			return "", 0, 0, fmt.Errorf("model span: %w", err)
		}
		if !isModel(name) {
			continue
		}
		end = int(d.InputOffset())
		start = end - len(v)
		if v[0] != '"' {
			start = -2 // remembered: the last "model" is not a string
		}
	}
	if _, err := d.ReadToken(); err != nil {
		return "", 0, 0, fmt.Errorf("model span: %w", err)
	}
	if _, err := d.ReadToken(); err != io.EOF {
		if err == nil {
			err = errors.New("trailing data after the object")
		}
		return "", 0, 0, fmt.Errorf("model span: %w", err)
	}
	switch start {
	case -1:
		return "", 0, 0, ErrNoModel
	case -2:
		return "", 0, 0, ErrModelNotString
	}
	return Unquote(body[start:end]), start, end, nil
}

// isModel reports whether a name token is "model" after unescaping.
func isModel(name []byte) bool {
	if string(name) == `"model"` {
		return true
	}
	return bytes.IndexByte(name, '\\') >= 0 && Unquote(name) == "model"
}
