package core

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// profileConfig is an E/P/D configuration for disagg-profile-handler with the given handler
// parameters and scheduling profile names.
func profileConfig(handlerParams string, profiles ...string) string {
	var b strings.Builder
	b.WriteString(`apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: encode-filter
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: always-disagg-multimodal-decider
- type: always-disagg-pd-decider
- type: disagg-profile-handler
  parameters:
` + handlerParams + `
schedulingProfiles:
`)
	filter := map[string]string{"encode": "encode-filter", "prefill": "prefill-filter"}
	for _, p := range profiles {
		f := filter[p]
		if f == "" {
			f = "decode-filter"
		}
		fmt.Fprintf(&b, "- name: %s\n  plugins:\n  - pluginRef: %s\n  - pluginRef: max-score-picker\n", p, f)
	}
	return b.String()
}

const (
	bothDeciders = `    deciders:
      prefill: always-disagg-pd-decider
      encode: always-disagg-multimodal-decider`
	prefillDecider = `    deciders:
      prefill: always-disagg-pd-decider`
)

// TestProfileNamesChecked: a profile a handler names, or a configured profile none of its
// stages is, fails the EPP's constructor (the one `pdgate validate` runs), naming the plugin
// and the profile, so a spelling mistake cannot silently switch prefill (or encode) off.
func TestProfileNamesChecked(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		wantErr []string
	}{
		{name: "good E/P/D", config: profileConfig(bothDeciders, "encode", "prefill", "decode")},
		{name: "good P/D, custom names", config: profileConfig(`    profiles: {decode: d, prefill: p}
`+prefillDecider, "p", "d")},
		{name: "llm-d decider without profiles (one profile: decode-only)", config: `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-based-pd-decider
  parameters:
    nonCachedTokens: 512
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: prefix-based-pd-decider
`},
		{name: "misspelled prefill in the handler's parameters", config: profileConfig(`    profiles: {prefill: prefil}
`+bothDeciders, "encode", "prefill", "decode"),
			wantErr: []string{"disagg-profile-handler", `prefill profile "prefil" (parameter profiles.prefill) is not configured`}},
		{name: "misspelled prefill in the flat (deprecated) parameters", config: profileConfig(`    prefillProfile: prefil
    prefillDeciderPluginName: always-disagg-pd-decider`, "prefill", "decode"),
			wantErr: []string{"disagg-profile-handler", `prefill profile "prefil"`}},
		{name: "misspelled prefill in schedulingProfiles", config: profileConfig(bothDeciders, "encode", "prefil", "decode"),
			wantErr: []string{"disagg-profile-handler", `scheduling profile "prefil" is none of its stages`}},
		{name: "misspelled decode", config: profileConfig(`    profiles: {decode: decod}
`+bothDeciders, "encode", "prefill", "decode"),
			wantErr: []string{"disagg-profile-handler", `decode profile "decod" is not configured`}},
		{name: "misspelled encode", config: profileConfig(`    profiles: {encode: encod}
`+bothDeciders, "encode", "prefill", "decode"),
			wantErr: []string{"disagg-profile-handler", `encode profile "encod" (parameter profiles.encode) is not configured`}},
		{name: "prefill decider without a prefill profile", config: profileConfig(bothDeciders, "encode", "decode"),
			wantErr: []string{"disagg-profile-handler", `prefill decider "always-disagg-pd-decider" is configured but the prefill profile "prefill" is not`}},
		{name: "pd-profile-handler: misspelled prefillProfile", config: `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: prefix-based-pd-decider
- type: pd-profile-handler
  parameters:
    prefillProfile: prefil
- type: disagg-headers-handler
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: max-score-picker
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
`, wantErr: []string{"pd-profile-handler", `prefill profile "prefil" (parameter prefillProfile) is not configured`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, err := New(ctx, Options{Config: []byte(tt.config), Validate: true})
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("New accepted the configuration; want an error with %q", tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

var topLevelKind = regexp.MustCompile(`(?m)^kind: *"?EndpointPickerConfig`)

// TestShippedConfigsLoad: every EndpointPickerConfig shipped under config/ (and llm-d's
// 2026-08 deploy configs kept as test data) still loads through the constructor `pdgate
// validate` and the EPP use, profile checks included. (llm-d's documented examples, some of
// which are refused on purpose, are test/integration/llmd's TestSpecificationExamples.)
func TestShippedConfigsLoad(t *testing.T) {
	root := filepath.Join("..", "..", "..")
	var files []string
	for _, dir := range []string{"config", filepath.Join("test", "integration", "llmd", "testdata", "llmd-deploy-2026-08")} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
				files = append(files, path)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	loaded := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !topLevelKind.Match(data) {
			continue // Helm values, lab topologies, cost profiles
		}
		rel, _ := filepath.Rel(root, f)
		t.Run(rel, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if _, err := New(ctx, Options{Config: data, Validate: true}); err != nil {
				t.Fatalf("New: %v", err)
			}
		})
		loaded++
	}
	if loaded < 40 {
		t.Fatalf("loaded %d configs; the layout under config/ changed", loaded)
	}
}
