// Package jsonbody edits the top level of a JSON object without re-marshalling the values the
// sidecar does not own: every member keeps its bytes and its position, so unknown fields,
// huge numbers and nested key order (prompt_token_ids, tool schemas) reach the engine exactly
// as the client sent them. Duplicate top-level keys are reported so the sidecar can refuse a
// body that repeats a key it controls (two parsers could otherwise disagree on its value).
//
// Bodies are read with go-json-experiment's jsontext (the future encoding/json/v2 text
// layer), set to accept what encoding/json accepts (duplicate names, invalid UTF-8 inside
// strings, nesting up to 10,000 levels): one validating pass that hands out each member's
// exact bytes. tidwall/gjson and sjson were measured for this and not taken; the README says
// why.
package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// member is one top-level key and its raw value bytes.
type member struct {
	key string
	raw json.RawMessage
}

// Object is an ordered, byte-preserving view of a JSON object's top level.
type Object struct {
	members []member
	dups    map[string]int
}

// ErrNotObject is returned when the body is valid JSON but not an object.
var ErrNotObject = errors.New("body is not a JSON object")

// v1Grammar makes jsontext accept exactly what encoding/json accepts (it rejects duplicate
// names and invalid UTF-8 by default); a package-level slice so Reset allocates nothing.
var v1Grammar = []jsontext.Options{jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true)}

// decoders are reused: a Decoder keeps its state-machine stacks between bodies.
var decoders = sync.Pool{New: func() any { return new(jsontext.Decoder) }}

// empty is what a pooled decoder reads, so that the pool keeps no body alive.
var empty = bytes.NewBuffer(nil)

// Parse reads one JSON object. Trailing data after the object is an error. The object does
// not retain b: it keeps one private copy, which every member's value is a slice of.
func Parse(b []byte) (*Object, error) {
	b = bytes.Clone(b)
	d := decoders.Get().(*jsontext.Decoder)
	defer func() {
		d.Reset(empty)
		decoders.Put(d)
	}()
	// A bytes.Buffer makes jsontext parse b in place: ReadValue returns sub-slices of b.
	d.Reset(bytes.NewBuffer(b), v1Grammar...)
	switch d.PeekKind() {
	case '{':
	case jsontext.KindInvalid:
		_, err := d.ReadToken()
		return nil, fmt.Errorf("parse JSON body: %w", err)
	default:
		return nil, ErrNotObject
	}
	if _, err := d.ReadToken(); err != nil {
		return nil, fmt.Errorf("parse JSON body: %w", err)
	}
	o := &Object{}
	for d.PeekKind() != '}' {
		name, err := d.ReadValue() // a peek error surfaces here
		if err != nil {
			return nil, fmt.Errorf("parse JSON body: %w", err)
		}
		key := unquote(name)
		raw, err := d.ReadValue()
		if err != nil {
			return nil, fmt.Errorf("parse JSON body: value of %q: %w", key, err)
		}
		o.parsed(key, json.RawMessage(raw))
	}
	if _, err := d.ReadToken(); err != nil {
		return nil, fmt.Errorf("parse JSON body: %w", err)
	}
	if _, err := d.ReadToken(); !errors.Is(err, io.EOF) {
		if err == nil {
			err = errors.New("trailing data after the object")
		}
		return nil, fmt.Errorf("parse JSON body: %w", err)
	}
	return o, nil
}

// parsed appends a member read from a body, counting a key that is already there as a
// duplicate (Duplicated reports it; setting the key drops the copies after the first).
func (o *Object) parsed(key string, raw json.RawMessage) {
	if o.index(key) >= 0 {
		if o.dups == nil {
			o.dups = map[string]int{}
		}
		o.dups[key]++
	}
	o.members = append(o.members, member{key: key, raw: raw})
}

// unquote decodes a name token the decoder validated, as encoding/json decodes a key: escapes,
// surrogate pairs (a lone one becomes U+FFFD) and invalid UTF-8 (U+FFFD per bad byte).
func unquote(tok []byte) string {
	inner := tok[1 : len(tok)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	// The error only reports the U+FFFD substitutions encoding/json also makes.
	out, _ := jsontext.AppendUnquote(nil, tok)
	return string(out)
}

// New returns an empty object.
func New() *Object { return &Object{} }

// Clone returns an independent copy (raw values are shared; they are never mutated in place).
func (o *Object) Clone() *Object {
	return &Object{members: slices.Clone(o.members), dups: maps.Clone(o.dups)}
}

// Duplicated returns the first of keys that appears more than once at the top level.
func (o *Object) Duplicated(keys ...string) (string, bool) {
	for _, k := range keys {
		if o.dups[k] > 0 {
			return k, true
		}
	}
	return "", false
}

func (o *Object) index(key string) int {
	for i := range o.members {
		if o.members[i].key == key {
			return i
		}
	}
	return -1
}

// Has reports whether key is present (even with a null value).
func (o *Object) Has(key string) bool { return o.index(key) >= 0 }

// Raw returns the raw bytes of key's value.
func (o *Object) Raw(key string) (json.RawMessage, bool) {
	if i := o.index(key); i >= 0 {
		return o.members[i].raw, true
	}
	return nil, false
}

// Keys returns the top-level keys in order.
func (o *Object) Keys() []string {
	out := make([]string, len(o.members))
	for i, m := range o.members {
		out[i] = m.key
	}
	return out
}

// SetRaw sets key to raw (which must be valid JSON), keeping its position when present and
// dropping any duplicates of it.
func (o *Object) SetRaw(key string, raw json.RawMessage) {
	i := o.index(key)
	if i < 0 {
		o.members = append(o.members, member{key: key, raw: raw})
		return
	}
	o.members[i].raw = raw
	o.dropAfter(key, i)
}

func (o *Object) dropAfter(key string, i int) {
	if o.dups[key] == 0 {
		return
	}
	out := o.members[:i+1]
	for _, m := range o.members[i+1:] {
		if m.key != key {
			out = append(out, m)
		}
	}
	o.members = out
	delete(o.dups, key)
}

// Set marshals v and sets it under key.
func (o *Object) Set(key string, v any) error {
	raw, err := marshal(v)
	if err != nil {
		return fmt.Errorf("set %q: %w", key, err)
	}
	o.SetRaw(key, raw)
	return nil
}

// SetInt sets key to an integer literal (no float64 round trip).
func (o *Object) SetInt(key string, v int64) {
	o.SetRaw(key, json.RawMessage(strconv.FormatInt(v, 10)))
}

// SetBool sets key to true or false.
func (o *Object) SetBool(key string, v bool) {
	o.SetRaw(key, json.RawMessage(strconv.FormatBool(v)))
}

// Delete removes every occurrence of key.
func (o *Object) Delete(key string) {
	out := o.members[:0]
	for _, m := range o.members {
		if m.key != key {
			out = append(out, m)
		}
	}
	o.members = out
	delete(o.dups, key)
}

// Bool returns key's value when it is a JSON boolean.
func (o *Object) Bool(key string) (value, ok bool) {
	raw, found := o.Raw(key)
	if !found {
		return false, false
	}
	switch string(bytes.TrimSpace(raw)) {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	return false, false
}

// String returns key's value when it is a JSON string.
func (o *Object) String(key string) (string, bool) {
	raw, found := o.Raw(key)
	if !found {
		return "", false
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// Object parses key's value as a nested object (nil, false when absent, null or not an object).
func (o *Object) Object(key string) (*Object, bool) {
	raw, found := o.Raw(key)
	if !found {
		return nil, false
	}
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		return nil, false
	}
	sub, err := Parse(t)
	if err != nil {
		return nil, false
	}
	return sub, true
}

// SetObject stores a nested object under key.
func (o *Object) SetObject(key string, sub *Object) { o.SetRaw(key, sub.Bytes()) }

// Bytes renders the object. Values keep their original bytes.
func (o *Object) Bytes() []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o.members {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := marshal(m.key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.raw)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func marshal(v any) (json.RawMessage, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return json.RawMessage(bytes.TrimRight(b.Bytes(), "\n")), nil
}
