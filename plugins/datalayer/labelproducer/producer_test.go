package labelproducer

import (
	"context"
	"encoding/json"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/internal/scalar"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestStamp(t *testing.T) {
	labels := map[string]string{"example.com/gpu": "h100", "example.com/tier": "2.5", "example.com/pool": "spot"}
	tests := []struct {
		name, params string
		want         map[string]fwkdl.Cloneable // every key the instance "lp" must have written
		absent       []string
		wantErr      string
	}{
		{name: "inline, string by default", params: `{"label":"example.com/gpu","attributeKey":"gpu"}`,
			want: map[string]fwkdl.Cloneable{"gpu": Text("h100"), "gpu/lp": Text("h100")}},
		{name: "inline string mode", params: `{"label":"example.com/tier","attributeKey":"tier","valueType":"string"}`,
			want: map[string]fwkdl.Cloneable{"tier": Text("2.5"), "tier/lp": Text("2.5")}},
		{name: "inline number mode", params: `{"label":"example.com/tier","attributeKey":"tier","valueType":"number"}`,
			want: map[string]fwkdl.Cloneable{"tier": &scalar.Value{V: 2.5}, "tier/lp": &scalar.Value{V: 2.5}}},
		{name: "number mode, not a number: 0 and an error", params: `{"label":"example.com/pool","attributeKey":"pool","valueType":"number"}`,
			want: map[string]fwkdl.Cloneable{"pool": &scalar.Value{V: 0}, "pool/lp": &scalar.Value{V: 0}}, wantErr: `label example.com/pool="spot" is not a number`},
		{name: "list form", params: `{"labels":[{"label":"example.com/gpu","attributeKey":"gpu"},{"label":"example.com/tier","attributeKey":"tier","valueType":"number"}]}`,
			want: map[string]fwkdl.Cloneable{"gpu": Text("h100"), "gpu/lp": Text("h100"), "tier": &scalar.Value{V: 2.5}, "tier/lp": &scalar.Value{V: 2.5}}},
		{name: "label the pod lacks: nothing written", params: `{"label":"example.com/zone","attributeKey":"zone","valueType":"number"}`,
			absent: []string{"zone", "zone/lp"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Factory("lp", json.RawMessage(tt.params), nil)
			if err != nil {
				t.Fatal(err)
			}
			ep := eptest.Scheduling(eptest.Spec{Name: "p", Labels: labels, NoMetrics: true})
			err = p.(*Producer).Stamp(ep)
			if !plugintest.WantErr(t, err, tt.wantErr) && err != nil {
				t.Fatal(err)
			}
			for k, want := range tt.want {
				got, ok := ep.Get(k)
				if !ok || !same(got, want) {
					t.Errorf("%s = %#v (%v), want %#v", k, got, ok, want)
				}
				if _, declared := p.(*Producer).Produces()[k]; !declared {
					t.Errorf("Produces does not declare %s", k)
				}
			}
			for _, k := range tt.absent {
				if v, ok := ep.Get(k); ok {
					t.Errorf("%s written: %#v", k, v)
				}
			}
		})
	}
}

func same(a, b fwkdl.Cloneable) bool {
	if x, ok := a.(*scalar.Value); ok {
		y, ok := b.(*scalar.Value)
		return ok && x.V == y.V
	}
	return a == b
}

// A bad number is logged, not returned: an error from PrepareData would stop the producers
// after this one.
func TestPrepareRequestDataStampsEveryCandidate(t *testing.T) {
	p, err := Factory("lp", json.RawMessage(`{"label":"example.com/tier","attributeKey":"tier","valueType":"number"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	good := eptest.Scheduling(eptest.Spec{Name: "good", Labels: map[string]string{"example.com/tier": "3"}, NoMetrics: true})
	bad := eptest.Scheduling(eptest.Spec{Name: "bad", Labels: map[string]string{"example.com/tier": "gold"}, NoMetrics: true})
	for range 2 { // the second request finds the warning already logged
		if err := p.(*Producer).PrepareRequestData(context.Background(), nil, []fwksched.Endpoint{bad, good, nil}); err != nil {
			t.Fatal(err)
		}
	}
	if v, ok := scalar.Read(good, "tier"); !ok || v != 3 {
		t.Errorf("good endpoint: %v %v", v, ok)
	}
	if v, ok := scalar.Read(bad, "tier/lp"); !ok || v != 0 {
		t.Errorf("bad endpoint: %v %v, want 0 stored", v, ok)
	}
	if n := len(p.(*Producer).warned); n != 1 {
		t.Errorf("%d warnings remembered, want 1", n)
	}
}

func TestParameters(t *testing.T) {
	tests := []struct {
		name, params, wantErr string
	}{
		{"inline", `{"label":"a","attributeKey":"k"}`, ""},
		{"list", `{"labels":[{"label":"a","attributeKey":"k"},{"label":"a","attributeKey":"k2","valueType":"number"}]}`, ""},
		{"no parameters", `{}`, "parameter label: required"},
		{"inline without attributeKey", `{"label":"a"}`, "parameter attributeKey: required"},
		{"inline without label", `{"attributeKey":"k","valueType":"number"}`, "parameter label: required"},
		{"bad valueType", `{"label":"a","attributeKey":"k","valueType":"float"}`, `parameter valueType: "float" must be "string" or "number"`},
		{"both forms", `{"label":"a","attributeKey":"k","labels":[{"label":"b","attributeKey":"j"}]}`, "exclusive"},
		{"empty list", `{"labels":[]}`, "parameter labels: must list at least one label"},
		{"list entry without label", `{"labels":[{"label":"a","attributeKey":"k"},{"attributeKey":"j"}]}`, "parameter labels[1].label: required"},
		{"list entry bad valueType", `{"labels":[{"label":"a","attributeKey":"k","valueType":"int"}]}`, "parameter labels[0].valueType"},
		{"duplicate keys", `{"labels":[{"label":"a","attributeKey":"k"},{"label":"b","attributeKey":"k"}]}`, `parameter labels[1].attributeKey: "k" is also labels[0]'s`},
		{"unknown field", `{"label":"a","attributeKey":"k","producer":"x"}`, "producer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Factory("pod-labels", json.RawMessage(tt.params), nil)
			plugintest.WantErr(t, err, tt.wantErr, Type, `"pod-labels"`)
		})
	}
}

func TestTextIsAStringer(t *testing.T) {
	var c fwkdl.Cloneable = Text("h100")
	if s, ok := c.Clone().(interface{ String() string }); !ok || s.String() != "h100" {
		t.Fatalf("Text must clone to a fmt.Stringer of its value: %#v", c.Clone())
	}
}
