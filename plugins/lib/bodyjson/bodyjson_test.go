package bodyjson

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestModelSpan(t *testing.T) {
	long := strings.Repeat("lorem \\n ipsum é ", 2000)
	tests := []struct {
		name, body, want string
		wantErr          error // nil: success; errSyntaxLike: any other error
	}{
		{name: "first member", body: `{"model":"m","prompt":"p"}`, want: "m"},
		{name: "after a long value and nested models", body: `{"prompt":"` + long + `","x":[{"model":"no"}],"y":{"model":"no"},"model":"m2"}`, want: "m2"},
		{name: "spaces around", body: " {\n \"model\" :\t\"m\" , \"a\" : 1 } \n", want: "m"},
		{name: "escaped value", body: `{"model":"caf\u00e9 \"q\""}`, want: `café "q"`},
		{name: "escaped key", body: `{"m\u006fdel":"m"}`, want: "m"},
		{name: "last wins", body: `{"model":"a","prompt":"p","model":"b"}`, want: "b"},
		{name: "last not a string", body: `{"model":"a","model":null}`, wantErr: ErrModelNotString},
		{name: "number", body: `{"model":5}`, wantErr: ErrModelNotString},
		{name: "case matters", body: `{"Model":"m"}`, wantErr: ErrNoModel},
		{name: "missing", body: `{"prompt":"p"}`, wantErr: ErrNoModel},
		{name: "empty object", body: `{}`, wantErr: ErrNoModel},
		{name: "array", body: `[{"model":"m"}]`, wantErr: ErrNotObject},
		{name: "null", body: `null`, wantErr: ErrNotObject},
		{name: "empty", body: ``, wantErr: errSyntaxLike},
		{name: "truncated", body: `{"model":"m"`, wantErr: errSyntaxLike},
		{name: "bad later value", body: `{"model":"m","a":tru}`, wantErr: errSyntaxLike},
		{name: "trailing value", body: `{"model":"m"} {}`, wantErr: errSyntaxLike},
		{name: "trailing garbage", body: `{"model":"m"}x`, wantErr: errSyntaxLike},
		{name: "duplicate keys and invalid UTF-8 allowed (as encoding/json)", body: "{\"a\":1,\"a\":\"\xff\",\"model\":\"m\xffx\"}", want: "m\uFFFDx"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model, start, end, err := ModelSpan([]byte(tt.body))
			switch {
			case tt.wantErr == errSyntaxLike:
				if err == nil || errors.Is(err, ErrNoModel) || errors.Is(err, ErrNotObject) || errors.Is(err, ErrModelNotString) {
					t.Fatalf("err = %v, want a syntax error", err)
				}
				return
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if model != tt.want {
				t.Fatalf("model %q, want %q", model, tt.want)
			}
			var fromToken string
			if err := json.Unmarshal([]byte(tt.body[start:end]), &fromToken); err != nil || fromToken != tt.want {
				t.Fatalf("body[%d:%d] = %q is not the model's token (%v)", start, end, tt.body[start:end], err)
			}
		})
	}
}

var errSyntaxLike = errors.New("any syntax error")

// TestUnquoteMatchesEncodingJSON covers the corners where jsontext's strict decoding and
// encoding/json's differ unless configured: lone and mismatched surrogates, invalid UTF-8.
func TestUnquoteMatchesEncodingJSON(t *testing.T) {
	for _, tok := range []string{`""`, `"plain"`, `"a\ud83d b\ude00 c\ud83d\u0041 d\ud83d\ud83d\ude00"`, "\"\xff\xfe ok \xe2\x82 \u00e9\"",
		`"\"\\\/\b\f\n\r\t"`, `"\u0000"`, `"\ud800"`, `"x\udbff\udfff"`} {
		var want string
		if err := json.Unmarshal([]byte(tok), &want); err != nil {
			t.Fatal(err)
		}
		if got := Unquote([]byte(tok)); got != want {
			t.Errorf("Unquote(%s) = %q, want %q", tok, got, want)
		}
	}
}

// FuzzModelSpan is differential against encoding/json: ModelSpan succeeds exactly when the
// body decodes into a map whose "model" is a string, returns that string, and splicing another
// quoted model into [start:end) changes only the model of what encoding/json decodes.
func FuzzModelSpan(f *testing.F) {
	for _, s := range []string{`{"model":"m","prompt":"p"}`, `{"m\u006fdel":"a","model":"b"}`, `{"model":1}`, `{"a":[{"model":"x"}]}`,
		`[1]`, `null`, `{"model":"\ud800"}`, "{\"model\":\"\xff\"}", `{"model":"m"} `, `{"model":"m"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		model, start, end, err := ModelSpan(body)
		var m map[string]any
		if jerr := json.Unmarshal(body, &m); jerr != nil {
			if err == nil {
				t.Fatalf("ModelSpan accepted what encoding/json rejects (%v): %q", jerr, body)
			}
			return
		}
		if m == nil {
			if !errors.Is(err, ErrNotObject) {
				t.Fatalf("null body: err %v", err)
			}
			return
		}
		want, isString := m["model"].(string)
		if !isString {
			if err == nil {
				t.Fatalf("model %v (%T): ModelSpan returned %q", m["model"], m["model"], model)
			}
			return
		}
		if err != nil || model != want {
			t.Fatalf("ModelSpan = %q, %v; encoding/json %q", model, err, want)
		}
		spliced := append(append(append([]byte(nil), body[:start]...), `"X\u00e9"`...), body[end:]...)
		var got map[string]any
		if err := json.Unmarshal(spliced, &got); err != nil {
			t.Fatalf("spliced body does not decode: %v", err)
		}
		m["model"] = "Xé"
		if !reflect.DeepEqual(got, m) {
			t.Fatalf("splice changed more than the model:\n%v\n%v", got, m)
		}
	})
}
