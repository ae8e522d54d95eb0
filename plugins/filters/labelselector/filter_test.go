package labelselector

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func eps() []fwksched.Endpoint {
	mk := func(name string, l map[string]string) fwksched.Endpoint {
		return eptest.Scheduling(eptest.Spec{Name: name, Labels: l, NoMetrics: true})
	}
	return []fwksched.Endpoint{
		mk("a", map[string]string{"role": "prefill", "zone": "x"}),
		mk("b", map[string]string{"role": "decode", "zone": "y"}),
		mk("c", map[string]string{"zone": "x"}),
		nil,
	}
}

func kept(f fwksched.Filter) string {
	var n []string
	for _, e := range f.Filter(context.Background(), nil, nil, eps()) {
		n = append(n, e.GetMetadata().NamespacedName.Name)
	}
	sort.Strings(n)
	return strings.Join(n, ",")
}

func TestSelector(t *testing.T) {
	tests := []struct {
		name, params, want, wantErr string
		factory                     fwkplugin.FactoryFunc
	}{
		{name: "matchLabels", params: `{"matchLabels":{"zone":"x"}}`, want: "a,c", factory: SelectorFactory},
		{name: "matchExpressions In", params: `{"matchExpressions":[{"key":"role","operator":"In","values":["prefill","decode"]}]}`, want: "a,b", factory: SelectorFactory},
		{name: "DoesNotExist", params: `{"matchExpressions":[{"key":"role","operator":"DoesNotExist"}]}`, want: "c", factory: SelectorFactory},
		{name: "both ANDed", params: `{"matchLabels":{"zone":"x"},"matchExpressions":[{"key":"role","operator":"Exists"}]}`, want: "a", factory: SelectorFactory},
		{name: "empty selects all", params: ``, want: "a,b,c", factory: SelectorFactory},
		{name: "deprecated alias", params: `{"matchLabels":{"role":"decode"}}`, want: "b", factory: LegacySelectorFactory},
		{name: "bad operator", params: `{"matchExpressions":[{"key":"role","operator":"Near"}]}`, wantErr: "invalid label selector", factory: SelectorFactory},
		{name: "unknown field", params: `{"matchLabel":{}}`, wantErr: `unknown field "matchLabel"`, factory: SelectorFactory},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tt.factory("sel", json.RawMessage(tt.params), nil)
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if got := kept(p.(fwksched.Filter)); got != tt.want {
				t.Fatalf("kept %s want %s", got, tt.want)
			}
		})
	}
	if _, err := SelectorFactory("", nil, nil); err == nil || err.Error() != "Selector: missing filter name" {
		t.Fatalf("missing name: %v", err)
	}
}

func TestByLabel(t *testing.T) {
	tests := []struct {
		name, params, want, wantErr string
	}{
		{name: "valid values", params: `{"label":"role","validValues":["prefill"]}`, want: "a"},
		{name: "allows no label", params: `{"label":"role","validValues":["decode"],"allowsNoLabel":true}`, want: "b,c"},
		{name: "only no label", params: `{"label":"role","allowsNoLabel":true}`, want: "c"},
		{name: "missing label", params: `{"validValues":["x"]}`, wantErr: "ByLabel: missing label name"},
		{name: "empty values without allowsNoLabel", params: `{"label":"role"}`, wantErr: "validValues is empty"},
		{name: "bad JSON", params: `{`, wantErr: `by-label "bl": invalid parameters`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ByLabelFactory("bl", json.RawMessage(tt.params), nil)
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if got := kept(p.(fwksched.Filter)); got != tt.want {
				t.Fatalf("kept %s want %s", got, tt.want)
			}
		})
	}
	if _, err := NewByLabel("", ByLabelParameters{Label: "x", AllowsNoLabel: true}); err == nil {
		t.Fatal("missing name")
	}
}
