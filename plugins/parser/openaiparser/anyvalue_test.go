package openaiparser

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/test/testsupport"
)

var anyValueCases = []string{
	`0`, `-0`, `1.5e3`, `-12.25E-2`, `123456789012345678901234567890`, `1e308`, `1e309`, `-1e400`,
	`true`, `false`, `null`, `""`, `"plain"`, `"esc\"aped\\ \/ \b\f\n\r\t \u00e9 \ud83d\ude00 \ud800"`,
	"\"bad utf-8 \xff\xfe\"", `[]`, `{}`, `[1,"a",null,true,[],{}]`,
	`{"a":1,"a":2,"b":{"c":[{"d":"e"}]}}`, `{"k\u00e9y":"v","":""}`,
	`[{"role":"user","content":"hello"},{"role":"assistant","content":[{"type":"text","text":"x"}]}]`,
	` [ 1 , { "x" : [ ] } ] `, strings.Repeat("[", 300) + strings.Repeat("]", 300),
}

// anyValue against encoding/json decoding into an any: the same value, or both refusing it.
func checkAnyValue(t *testing.T, text string) {
	t.Helper()
	var want any
	wantErr := json.Unmarshal([]byte(text), &want)
	s := scanner{b: []byte(text)}
	ok := s.skip()
	if s.ws(); !ok || s.i != len(s.b) {
		if wantErr == nil {
			t.Fatalf("%q: the scanner rejects what encoding/json accepts", text)
		}
		return // the payload map decodes only what the scanner validated
	}
	s = scanner{b: []byte(text)}
	got, err := s.anyValue()
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%q: error %v, encoding/json %v", text, err, wantErr)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: %#v, encoding/json %#v", text, got, want)
	}
}

func TestAnyValue(t *testing.T) {
	for _, text := range anyValueCases {
		t.Run(text[:min(len(text), 24)], func(t *testing.T) { checkAnyValue(t, text) })
	}
}

func FuzzAnyValue(f *testing.F) {
	for _, text := range anyValueCases {
		f.Add(text)
	}
	f.Fuzz(checkAnyValue)
}

// The payload map of a small chat: every top-level value decoded as encoding/json decodes it,
// and a number out of range refused with encoding/json's words.
func TestPayloadMapMatchesEncodingJSON(t *testing.T) {
	body := `{"model":"m","max_tokens":128,"temperature":0.7,"stream":false,"messages":[{"role":"user","content":"hi \u00e9"}],"n":null}`
	p := New("", Params{Payload: ModeMap})
	out, _, err := p.ParseRequestLocatingModel(t.Context(), []byte(body), map[string]string{":path": "/v1/chat/completions"})
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]any
	if err := json.Unmarshal([]byte(body), &want); err != nil {
		t.Fatal(err)
	}
	if got := map[string]any(out.Payload.(fwksched.PayloadMap)); !reflect.DeepEqual(got, want) {
		t.Fatalf("payload %#v, want %#v", got, want)
	}
	_, _, err = p.ParseRequestLocatingModel(t.Context(), []byte(`{"model":"m","max_tokens":1e999,"messages":[{"role":"user","content":"x"}]}`), map[string]string{":path": "/v1/chat/completions"})
	if err == nil || !strings.Contains(err.Error(), `field "max_tokens": json: cannot unmarshal number 1e999`) {
		t.Fatalf("out-of-range number: %v", err)
	}
}

// BenchmarkPayloadValues decodes the small top-level values of a 1 KB chat (what map mode
// decodes: messages, max_tokens, temperature) with the scanner and with encoding/json in the
// same run, and logs the ratio of their CPU time.
func BenchmarkPayloadValues(b *testing.B) {
	msgs := `[{"role":"system","content":"You are a careful assistant."},{"role":"user","content":"` +
		strings.Repeat("a document line with words\n", 30)[:800] + `"}]`
	msgs = strings.ReplaceAll(msgs, "\n", `\n`)
	values := [][]byte{[]byte(msgs), []byte(`128`), []byte(`0.7`)}
	decode := map[string]func(v []byte) error{
		"scanner":       func(v []byte) error { s := scanner{b: v}; _, err := s.anyValue(); return err },
		"encoding/json": func(v []byte) error { var x any; return json.Unmarshal(v, &x) },
	}
	cpu := map[string]float64{}
	for _, name := range []string{"encoding/json", "scanner"} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			cpu[name], _ = testsupport.LoopCPU(b, func() error {
				for _, v := range values {
					if err := decode[name](v); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	if cpu["scanner"] > 0 {
		b.Logf("scanner %.2fx less CPU than encoding/json", cpu["encoding/json"]/cpu["scanner"])
	}
}
