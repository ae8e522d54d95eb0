package pluginset

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

// TestInTreeListMatchesGIE re-reads GIE's runner source so that an upgrade that adds an
// in-tree plugin fails here instead of silently leaving it unregistered.
func TestInTreeListMatchesGIE(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		t.Fatalf("locating GIE: %v", err)
	}
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "cmd", "epp", "runner", "runner.go"))
	if err != nil {
		t.Fatal(err)
	}
	calls := regexp.MustCompile(`fwkplugin\.Register\(`).FindAll(src, -1)
	if len(calls) != len(inTree)+len(ownedByPdgate) {
		t.Fatalf("GIE's runner registers %d plugins, pluginset %d (+ %d owned by pdgate)", len(calls), len(inTree), len(ownedByPdgate))
	}
}

func TestRegisterAllKeepsPdgateTypesAndInTreeDisjoint(t *testing.T) {
	RegisterAll()
	inTreeNames := map[string]bool{}
	for _, n := range InTreeTypeNames() {
		inTreeNames[n] = true
		if fwkplugin.Registry[n] == nil {
			t.Errorf("in-tree type %s not registered", n)
		}
	}
	pdgateNames := map[string]bool{}
	for _, n := range plugins.TypeNames() {
		pdgateNames[n] = true
	}
	for _, n := range ownedByPdgate {
		if !pdgateNames[n] {
			t.Errorf("GIE type %s is left out of the in-tree list but pdgate registers no replacement", n)
		}
	}
	for _, n := range plugins.TypeNames() {
		if inTreeNames[n] {
			t.Errorf("pdgate type %q collides with a GIE in-tree type; pick a distinct name", n)
		}
		if fwkplugin.Registry[n] == nil {
			t.Errorf("pdgate type %s not registered", n)
		}
	}
}

func TestNormalizeAPIVersion(t *testing.T) {
	tests := []struct {
		name, in, want, wantErr string
	}{
		{name: "gie untouched", in: "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n",
			want: "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"},
		{name: "llm-d rewritten", in: "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n",
			want: "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"},
		{name: "llm-d quoted", in: "kind: EndpointPickerConfig\napiVersion: 'llm-d.ai/v1alpha1'\n",
			want: "kind: EndpointPickerConfig\napiVersion: 'inference.networking.x-k8s.io/v1alpha1'\n"},
		{name: "llm-d json", in: `{"apiVersion": "llm-d.ai/v1alpha1", "kind": "EndpointPickerConfig"}`,
			want: `{"apiVersion": "inference.networking.x-k8s.io/v1alpha1", "kind": "EndpointPickerConfig"}`},
		{name: "other", in: "apiVersion: v1\n", wantErr: `apiVersion "v1" is not supported`},
		{name: "not yaml", in: "a: [", wantErr: "not a YAML/JSON document"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := normalizeAPIVersion([]byte(tt.in))
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if err != nil || string(got) != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, _, err := LoadRaw([]byte("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nbogus: 1\n"), logr.Discard()); err == nil ||
		!strings.Contains(err.Error(), `unknown field "bogus"`) {
		t.Fatalf("llm-d configs must stay strict, got %v", err)
	}
}

func FuzzNormalizeAPIVersion(f *testing.F) {
	f.Add("apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n")
	f.Add(`{"apiVersion":"llm-d.ai/v1alpha1"}`)
	f.Add("x: 'apiVersion: llm-d.ai/v1alpha1'\napiVersion: llm-d.ai/v1alpha1\n")
	f.Fuzz(func(t *testing.T, s string) {
		out, err := normalizeAPIVersion([]byte(s))
		if err != nil || len(s) == 0 {
			return
		}
		// Whatever is accepted must now carry GIE's apiVersion (or none).
		again, err := normalizeAPIVersion(out)
		if err != nil {
			t.Fatalf("normalized output rejected: %v (%q)", err, out)
		}
		if string(again) != string(out) {
			t.Fatalf("not idempotent: %q -> %q", out, again)
		}
	})
}
