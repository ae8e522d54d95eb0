package jsonbody

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
)

// parseStd is the encoding/json implementation Parse had before it moved to jsontext, kept as
// the reference of the differential fuzz test and the baseline of BenchmarkParseEdit.
func parseStd(b []byte) (*Object, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("parse JSON body: %w", err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, ErrNotObject
	}
	o := &Object{}
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("parse JSON body: %w", err)
		}
		key, ok := kt.(string)
		if !ok {
			return nil, fmt.Errorf("parse JSON body: object key is %T", kt)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("parse JSON body: value of %q: %w", key, err)
		}
		o.parsed(key, raw)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("parse JSON body: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("parse JSON body: trailing data after the object")
	}
	return o, nil
}

// FuzzParseDifferential: Parse accepts exactly the objects the encoding/json implementation
// accepted (and json.Valid accepts), with the same keys in the same order, the same value
// bytes and the same duplicates, so every edit renders the same body.
func FuzzParseDifferential(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"stream":true,"str\u0065am":false}`, `{"x":[1,{"y":"\u00e9"}],"n":1e999}`,
		"{\"p\":\"\xff\",\"\xfe\":1}", `{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, `{}`, `[]`,
		`{"a":"\ud800"}`, ` {"a" : [ 1 , 2 ] } `, `{"a":1}{}`, `{"a":1,}`, `{"a":01}`, `{1:2}`, `"x"`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Parse(b)
		want, wantErr := parseStd(b)
		if (err == nil) != (wantErr == nil) {
			// The one known difference: the old Decoder allowed 10,000 levels inside a member
			// (10,001 in all), which json.Valid rejects; Parse must then side with json.Valid.
			if !(err != nil && wantErr == nil && !json.Valid(b)) {
				t.Fatalf("accept mismatch: jsontext %v, encoding/json %v", err, wantErr)
			}
		}
		if err != nil {
			return
		}
		if !json.Valid(b) {
			t.Fatalf("accepted invalid JSON %q", b)
		}
		if !reflect.DeepEqual(got.members, want.members) || !reflect.DeepEqual(got.dups, want.dups) {
			t.Fatalf("members differ:\njsontext      %q %v\nencoding/json %q %v", got.members, got.dups, want.members, want.dups)
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Fatalf("rendered bodies differ:\n%s\n%s", got.Bytes(), want.Bytes())
		}
	})
}

// TestParseMatchesReferenceAtDepthLimit pins the nesting limit: encoding/json's Decoder
// counted depth per Decode call (10,000 levels inside the member), jsontext counts from the
// top (10,000 levels in all, as json.Unmarshal and json.Valid do).
func TestParseMatchesReferenceAtDepthLimit(t *testing.T) {
	for _, n := range []int{9999, 10000} {
		b := []byte(`{"a":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`)
		_, err := Parse(b)
		if (err == nil) != json.Valid(b) {
			t.Fatalf("depth %d+1: Parse err %v, json.Valid %v", n, err, json.Valid(b))
		}
	}
}
