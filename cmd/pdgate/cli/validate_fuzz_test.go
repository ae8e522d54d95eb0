package cli

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// FuzzValidate drives EndpointPickerConfig documents and every plugin's parameters through
// the EPP's whole load path (decode, instantiate, references, data dependencies, tracing):
// whatever the bytes, an error or a report, never a panic; a document that loads once loads
// again with the same profiles. Seeds: every shipped config plus malformed variants.
func FuzzValidate(f *testing.F) {
	for _, pattern := range []string{"config/*.yaml", "config/llmd/*.yaml", "config/aibrix/*.yaml", "config/lab/epp/*.yaml"} {
		files, _ := filepath.Glob(filepath.Join("..", "..", "..", pattern))
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	f.Add([]byte("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: prefix-based-pd-decider\n  parameters: {nonCachedTokens: -1}\n"))
	f.Add([]byte("apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: pd-token-ledger\n  parameters: {ttl: 1e400}\n"))
	f.Add([]byte(`{"apiVersion":"inference.networking.x-k8s.io/v1alpha1","kind":"EndpointPickerConfig","plugins":[{"type":"disagg-profile-handler","parameters":{"deciders":{"prefill":"x"}}}],"schedulingProfiles":[{"name":"decode","plugins":[{"pluginRef":"nope"}]}]}`))
	f.Add([]byte("plugins: [{type: aibrix-pd-pair, parameters: {a: {b: {c: [[[[]]]]}}}}]\n"))
	f.Add([]byte("\xff\xfe\x00apiVersion: x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 64<<10 {
			return
		}
		rep, err := Validate(context.Background(), b)
		if err != nil {
			return
		}
		if rep == nil {
			t.Fatal("no error and no report")
		}
		again, err := Validate(context.Background(), b)
		if err != nil {
			t.Fatalf("accepted once, rejected the second time: %v", err)
		}
		if len(again.Profiles) != len(rep.Profiles) || again.ProfileHandler != rep.ProfileHandler {
			t.Fatalf("not deterministic: %+v vs %+v", rep, again)
		}
	})
}
