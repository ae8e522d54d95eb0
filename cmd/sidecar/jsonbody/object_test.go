package jsonbody

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestParseAndEdit(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		edit    func(o *Object)
		want    string
		wantErr bool
	}{
		{name: "unknown fields and order kept", in: `{"z":1,"model":"m","a":{"y":2,"x":1}}`,
			edit: func(o *Object) { o.SetInt("max_tokens", 1) }, want: `{"z":1,"model":"m","a":{"y":2,"x":1},"max_tokens":1}`},
		{name: "set keeps position", in: `{"stream":true,"model":"m"}`,
			edit: func(o *Object) { o.SetBool("stream", false) }, want: `{"stream":false,"model":"m"}`},
		{name: "delete", in: `{"stream_options":{"include_usage":true},"model":"m"}`,
			edit: func(o *Object) { o.Delete("stream_options") }, want: `{"model":"m"}`},
		{name: "huge number preserved", in: `{"seed":123456789012345678901234567890,"x":1e400}`,
			edit: func(o *Object) {}, want: `{"seed":123456789012345678901234567890,"x":1e400}`},
		{name: "nested bytes untouched", in: `{"prompt_token_ids": [1, 2,  3]}`,
			edit: func(o *Object) {}, want: `{"prompt_token_ids":[1, 2,  3]}`},
		{name: "set drops duplicates", in: `{"rid":"a","m":1,"rid":"b"}`,
			edit: func(o *Object) { _ = o.Set("rid", "c") }, want: `{"rid":"c","m":1}`},
		{name: "html not escaped", in: `{}`, edit: func(o *Object) { _ = o.Set("s", "<a&b>") }, want: `{"s":"<a&b>"}`},
		{name: "array", in: `[1]`, wantErr: true},
		{name: "trailing", in: `{"a":1}{"b":2}`, wantErr: true},
		{name: "truncated", in: `{"a":1`, wantErr: true},
		{name: "empty", in: ``, wantErr: true},
		{name: "deep nesting", in: `{"a":` + strings.Repeat("[", 20000) + strings.Repeat("]", 20000) + `}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := Parse([]byte(tt.in))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("Parse(%q) succeeded, want error", tt.in)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.edit(o)
			if got := string(o.Bytes()); got != tt.want {
				t.Fatalf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestDuplicated(t *testing.T) {
	tests := []struct {
		in   string
		keys []string
		want string
	}{
		{in: `{"stream":true,"stream":false}`, keys: []string{"stream"}, want: "stream"},
		{in: `{"stream":true,"str\u0065am":false}`, keys: []string{"stream"}, want: "stream"},
		{in: `{"a":1,"a":2}`, keys: []string{"stream"}, want: ""},
		{in: `{"a":1,"b":{"stream":1,"stream":2}}`, keys: []string{"stream"}, want: ""},
	}
	for _, tt := range tests {
		o, err := Parse([]byte(tt.in))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := o.Duplicated(tt.keys...)
		if got != tt.want {
			t.Errorf("Duplicated(%s) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestAccessors(t *testing.T) {
	o, err := Parse([]byte(`{"b":true,"s":"x","o":{"k":1},"n":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := o.Bool("b"); !v || !ok {
		t.Error("Bool")
	}
	if v, ok := o.String("s"); v != "x" || !ok {
		t.Error("String")
	}
	if _, ok := o.Object("n"); ok {
		t.Error("null is not an object")
	}
	sub, ok := o.Object("o")
	if !ok || !sub.Has("k") {
		t.Error("Object")
	}
	c := o.Clone()
	c.Delete("b")
	if !o.Has("b") || c.Has("b") {
		t.Error("Clone must be independent")
	}
}

// A clone keeps its own record of repeated keys: deleting one in the clone must not make the
// original forget that the body repeated it.
func TestCloneKeepsItsOwnDuplicates(t *testing.T) {
	o, err := Parse([]byte(`{"model":"a","model":"b","x":1}`))
	if err != nil {
		t.Fatal(err)
	}
	c := o.Clone()
	if k, ok := c.Duplicated("model"); !ok || k != "model" {
		t.Fatalf("clone lost the duplicate: %q %v", k, ok)
	}
	c.Delete("model")
	if _, ok := c.Duplicated("model"); ok {
		t.Error("the clone still reports a key it deleted")
	}
	if k, ok := o.Duplicated("model"); !ok || k != "model" {
		t.Errorf("deleting in the clone changed the original: %q %v", k, ok)
	}
}

func TestInvalidUTF8PassesThrough(t *testing.T) {
	in := []byte("{\"p\":\"a\xffb\",\"m\":1}")
	o, err := Parse(in)
	if err != nil {
		t.Skipf("decoder refuses invalid UTF-8: %v", err)
	}
	o.SetInt("max_tokens", 1)
	if !bytes.Contains(o.Bytes(), []byte("a\xffb")) {
		t.Fatalf("string bytes changed: %q", o.Bytes())
	}
}

func FuzzParseEdit(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"stream":true,"stream":false}`, `{"x":[1,{"y":"\u00e9"}],"n":1e999}`,
		"{\"p\":\"\xff\"}", `{"a":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, `{}`, `[]`, `{"a":"\ud800"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		o, err := Parse(b)
		if err != nil {
			return
		}
		keys := o.Keys()
		o.SetInt("max_tokens", 1)
		o.Delete("stream_options")
		out := o.Bytes()
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("re-parse of %q failed: %v", out, err)
		}
		if !again.Has("max_tokens") || again.Has("stream_options") {
			t.Fatalf("edits lost: %s", out)
		}
		for _, k := range keys {
			if k != "stream_options" && !again.Has(k) {
				t.Fatalf("key %q lost: %s", k, out)
			}
		}
		if !json.Valid(out) && json.Valid(b) {
			t.Fatalf("output invalid: %s", out)
		}
	})
}
