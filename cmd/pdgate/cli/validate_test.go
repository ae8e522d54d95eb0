package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/internal/controlplane"
)

func gieDir(t *testing.T) string {
	t.Helper()
	dir, err := controlplane.GIEModuleDir("")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	return out.String(), err
}

// checkValidate wants an error holding every wantErr when there are any, else success and
// an output holding every wantOut.
func checkValidate(t *testing.T, out string, err error, wantOut, wantErr []string) {
	t.Helper()
	if len(wantErr) > 0 {
		if err == nil {
			t.Fatalf("want error, got OK:\n%s", out)
		}
		for _, w := range wantErr {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
		return
	}
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, w := range wantOut {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestValidateGIESamples(t *testing.T) {
	dir := gieDir(t)
	tests := []struct {
		file    string
		wantOut []string
		wantErr []string
	}{
		{file: "test/integration/epp/testdata/default-config.yaml",
			wantOut: []string{"OK", "profile handler: single-profile-handler", "default: queue-scorer (weight 1)", "feature gates: enableLegacyMetrics"}},
		{file: "test/integration/epp/testdata/request-attribute-reporter-config.yaml",
			wantOut: []string{"total-tokens-cost-reporter", "type=request-attribute-reporter", "roles=response-body"}},
		// A GIE test-only plugin the EPP binary does not register either.
		{file: "test/integration/epp/testdata/datalayer-config.yaml", wantErr: []string{"plugin type 'mock-metrics-source' is not registered"}},
		// Stale sample: the field does not exist in v1.5.0's types.
		{file: "test/testdata/configloader_1_test.yaml", wantErr: []string{`unknown field "saturationDetector.metricsStalenessThreshold"`}},
	}
	for _, tt := range tests {
		t.Run(filepath.Base(tt.file), func(t *testing.T) {
			out, err := run(t, "validate", "--config", filepath.Join(dir, tt.file))
			checkValidate(t, out, err, tt.wantOut, tt.wantErr)
		})
	}
}

func TestValidateConfigs(t *testing.T) {
	tests := []struct {
		name    string
		config  string
		wantOut []string
		wantErr []string
	}{
		{name: "empty config is GIE's default", config: "",
			wantOut: []string{"queue-scorer (weight 2)", "prefix-cache-scorer (weight 3)", "metrics-data-source -> core-metrics-extractor"}},
		{name: "llm-d apiVersion", config: `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
`, wantOut: []string{"default: queue-scorer (weight 2), max-score-picker"}},
		{name: "quoted llm-d apiVersion", config: "apiVersion: \"llm-d.ai/v1alpha1\"\nkind: EndpointPickerConfig\n",
			wantOut: []string{"single-profile-handler"}},
		{name: "flow control example (GIE reference)", config: `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- name: maxScore
  type: max-score-picker
- name: customFCFS
  type: fcfs-ordering-policy
- name: customFairness
  type: global-strict-fairness-policy
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: maxScore
featureGates:
- flowControl
flowControl:
  priorityBands:
  - priority: 100
    orderingPolicyRef: customFCFS
    fairnessPolicyRef: customFairness
`, wantOut: []string{"feature gates: flowControl", "default: maxScore"}},
		{name: "unknown apiVersion", config: "apiVersion: example.com/v1\nkind: EndpointPickerConfig\n",
			wantErr: []string{`apiVersion "example.com/v1" is not supported`}},
		{name: "unknown field", config: "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugin: []\n",
			wantErr: []string{`unknown field "plugin"`}},
		{name: "bad plugin parameter", config: `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- name: pick
  type: max-score-picker
  parameters: {maxNumOfEndpoints: many}
`, wantErr: []string{"failed to create plugin 'pick' (type: max-score-picker)", "maxNumOfEndpoints"}},
		{name: "undefined profile reference", config: `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: nowhere
`, wantErr: []string{"references undefined plugin 'nowhere'"}},
		{name: "in-flight producer with token-load scorer", config: `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: inflight-load-producer
- type: token-load-scorer
`, wantErr: []string{"data type mismatch"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(f, []byte(tt.config), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := run(t, "validate", "--config", f)
			checkValidate(t, out, err, tt.wantOut, tt.wantErr)
		})
	}
}

func TestValidateNeedsConfig(t *testing.T) {
	if _, err := run(t, "validate"); err == nil || !strings.Contains(err.Error(), "--config is required") {
		t.Fatalf("err = %v", err)
	}
}
