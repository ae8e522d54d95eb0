package llmd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/pdgate/cli"
)

// Every llm-d sample config loads unchanged through `pdgate validate` (the same phases as
// the EPP), with the expected profile handler.
func TestSampleConfigsValidate(t *testing.T) {
	want := map[string]string{
		"pd.yaml":                 "disagg-profile-handler",
		"decode-only.yaml":        "disagg-profile-handler",
		"e-pd.yaml":               "disagg-profile-handler",
		"e-p-d.yaml":              "disagg-profile-handler",
		"conditional-decode.yaml": "single-profile-handler",
		"pd-deprecated.yaml":      "pd-profile-handler",
		"precise-pd.yaml":         "disagg-profile-handler",
	}
	files, err := filepath.Glob("../../../config/llmd/*.yaml")
	if err != nil || len(files) != len(want) {
		t.Fatalf("config/llmd has %d files (%v), want %d", len(files), err, len(want))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := cli.Validate(context.Background(), data)
			if err != nil {
				t.Fatalf("validate: %v", err)
			}
			if rep.ProfileHandler != want[filepath.Base(f)] {
				t.Fatalf("profile handler %q, want %q", rep.ProfileHandler, want[filepath.Base(f)])
			}
		})
	}
}

// Malformed llm-d parameters fail validation with llm-d's message, naming the plugin.
func TestInvalidConfigsNameThePluginAndField(t *testing.T) {
	head := "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
	profiles := "schedulingProfiles:\n- name: decode\n  plugins:\n  - pluginRef: decode-filter\n"
	tests := map[string]struct{ plugins, want string }{
		"negative nonCachedTokens": {"- type: decode-filter\n- type: prefix-based-pd-decider\n  parameters: {nonCachedTokens: -1}\n",
			"nonCachedTokens parameter of prefix disaggregation decider cannot be negative"},
		"mixed handler formats": {"- type: decode-filter\n- type: disagg-profile-handler\n  parameters: {decodeProfile: decode, profiles: {prefill: p}}\n",
			"cannot mix deprecated flat parameters"},
		"decider of the wrong type": {"- type: decode-filter\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: decode-filter}}\n",
			"plugin decode-filter does not implement prefillDeciderPlugin"},
		"primaryPort out of range": {"- type: decode-filter\n- type: prefix-based-pd-decider\n- type: pd-profile-handler\n  parameters: {primaryPort: 70000}\n",
			"invalid primaryPort: must be between 1 and 65535, got 70000"},
		"unknown token-producer backend key": {"- type: decode-filter\n- type: token-producer\n  parameters: {vlm: {}}\n",
			`unknown field "vlm"`},
		"by-label without label": {"- type: decode-filter\n- type: by-label\n  parameters: {validValues: [a]}\n",
			"ByLabel: missing label name"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := cli.Validate(context.Background(), []byte(head+tt.plugins+profiles))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}
