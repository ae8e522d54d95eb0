package llmd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/pdgate/cli"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Every configuration example of llm-d's disaggregation specification (testdata/spec, as the
// document prints them) either routes as the document describes, through `pdgate validate` and
// the real EPP assembly over real ext_proc, or is refused by validate with an error naming the
// plugin; validate and the EPP agree on which.
func TestSpecificationExamples(t *testing.T) {
	pods := []pod{
		{name: "prefill-0", ip: "127.0.0.81", labels: map[string]string{role: "prefill"}},
		{name: "decode-0", ip: "127.0.0.82", labels: map[string]string{role: "decode"}},
	}
	tests := []struct {
		file string
		// refused names what the error must mention; empty means the config must route.
		refused string
		// conditional: a Prefer: if-available request with an uncached long prompt gets 412.
		conditional bool
	}{
		// "Decode-only (no disaggregation)": one GIE default profile, used as decode.
		{file: "decode-only.yaml"},
		// The P/D and E/P/D fragments name deciders they do not declare; the document says
		// "names ... must match plugin names declared earlier in the same configuration".
		{file: "pd.yaml", refused: "prefix-based-pd-decider"},
		{file: "epd.yaml", refused: "prefix-based-pd-decider"},
		{file: "headers-handler.yaml"},
		{file: "headers-handler-custom-profiles.yaml"},
		// Decider and handler without profiles: decode-only, the gate still answers.
		{file: "decider-and-handler.yaml", conditional: true},
		// "No disagg-profile-handler / no prefill profile": the gate alone.
		{file: "conditional-decode-only.yaml", conditional: true},
	}
	files, _ := filepath.Glob("testdata/spec/*.yaml")
	if len(files) != len(tests) {
		t.Fatalf("testdata/spec has %d examples, the table %d: every example needs an expectation", len(files), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			fragment, err := os.ReadFile(filepath.Join("testdata/spec", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			full := "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n" + string(fragment)
			_, err = cli.Validate(context.Background(), []byte(full))
			if tt.refused != "" {
				if err == nil || !strings.Contains(err.Error(), tt.refused) {
					t.Fatalf("validate: %v, want an error naming %q", err, tt.refused)
				}
				return
			}
			if err != nil {
				t.Fatalf("validate refused an example the document says works: %v", err)
			}
			path := filepath.Join(t.TempDir(), tt.file)
			if err := os.WriteFile(path, []byte(full), 0o600); err != nil {
				t.Fatal(err)
			}
			e := startEPP(t, path, pods)
			a := e.send(t, "/v1/completions", nil, completionBody("hello"))
			if a.immediate != 0 || a.destination == "" {
				t.Fatalf("the example must route a request: %s", a)
			}
			if _, p := a.set[protocol.HeaderPrefillerHostPort]; p {
				t.Fatalf("no prefill profile, yet a prefill header: %s", a)
			}
			miss := e.send(t, "/v1/completions", map[string]string{"prefer": "if-available"},
				completionBody(strings.Repeat("an uncached prompt far above the threshold ", 200)))
			if tt.conditional && (miss.immediate != 412 || miss.body != protocol.ConditionalDecodeBody) {
				t.Fatalf("conditional decode must answer llm-d's 412: %s", miss)
			}
			if !tt.conditional && miss.immediate != 0 {
				t.Fatalf("without a gate, Prefer: if-available is forwarded: %s", miss)
			}
		})
	}
}
