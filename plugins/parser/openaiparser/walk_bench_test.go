package openaiparser

import (
	"errors"
	"reflect"
	"testing"

	"github.com/pdgate/pdgate/plugins/lib/bodyjson"
)

// BenchmarkWalk isolates the pass over the bytes (the chat decode, then the raw mode's
// top-level model lookup) from what GIE's code adds around it (PromptText, the director's
// marshal), and runs it with the hand-written scanner and with the jsontext twin kept in
// jsontext_test.go on the same bodies, logging the ratio of the two measured in the same run.
func BenchmarkWalk(b *testing.B) {
	walks := []struct {
		name string
		walk func([]byte) error
	}{
		{"scanner", func(body []byte) error {
			if _, err := decodeFast(body, "chat"); err != nil {
				return err
			}
			if _, ok := topLevelModel(body); !ok {
				return errors.New("no model")
			}
			return nil
		}},
		{"jsontext", func(body []byte) error {
			if _, err := decodeJSONText(body, "chat"); err != nil {
				return err
			}
			_, _, _, err := bodyjson.ModelSpan(body)
			return err
		}},
	}
	for label, body := range benchBodies {
		ns := map[string]float64{}
		for _, w := range walks {
			ns[w.name], _ = measure(b, label+"/"+w.name, body, w.walk)
		}
		if ns["scanner"] > 0 && ns["jsontext"] > 0 {
			b.Logf("%s: jsontext %.0f CPU ns/op, scanner %.0f (jsontext costs %.2fx)",
				label, ns["jsontext"], ns["scanner"], ns["jsontext"]/ns["scanner"])
		}
	}
}

// TestJSONTextWalkAgrees keeps the benchmarked jsontext twin honest: on every parse case and
// API it accepts, rejects and decodes exactly what the scanner does.
func TestJSONTextWalkAgrees(t *testing.T) {
	class := func(err error) string {
		for _, e := range []error{errSyntax, errNotObject, errAPI} {
			if errors.Is(err, e) {
				return e.Error()
			}
		}
		if err != nil {
			return "other: " + err.Error()
		}
		return ""
	}
	for _, c := range parseCases() {
		for _, api := range []string{"chat", "completions", "responses", "conversations", "embeddings"} {
			want, wantErr := decodeFast([]byte(c.body), api)
			got, gotErr := decodeJSONText([]byte(c.body), api)
			if class(wantErr) != class(gotErr) {
				t.Fatalf("%s/%s: scanner %v, jsontext %v", c.name, api, wantErr, gotErr)
			}
			if want == nil || got == nil {
				continue
			}
			if !reflect.DeepEqual(want.body, got.body) || want.model != got.model || want.modelOK != got.modelOK ||
				want.stream != got.stream || len(want.members) != len(got.members) {
				t.Fatalf("%s/%s: decoded differently:\nscanner  %+v\njsontext %+v", c.name, api, want, got)
			}
			for i, m := range want.members {
				if string(m.key) != string(got.members[i].key) || string(m.value) != string(got.members[i].value) {
					t.Fatalf("%s/%s: member %d: scanner %s=%.40s, jsontext %s=%.40s", c.name, api, i, m.key, m.value, got.members[i].key, got.members[i].value)
				}
			}
		}
	}
}
