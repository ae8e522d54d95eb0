package endpointattrweightscorer

import (
	"context"
	"encoding/json"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/datalayer/labelproducer"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/internal/scalar"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// The textual values are what label-producer writes in string mode.
func TestScore(t *testing.T) {
	const gpu = `{"attributeKey":"gpu","weights":{"h100":4,"a100":2,"l4":1}}`
	tests := []struct {
		name, params string
		attrs        map[string]fwkdl.Cloneable // nil: the candidate has no attribute
		want         float64
	}{
		{"highest weight scores 1", gpu, map[string]fwkdl.Cloneable{"gpu": labelproducer.Text("h100")}, 1},
		{"weight over the maximum", gpu, map[string]fwkdl.Cloneable{"gpu": labelproducer.Text("a100")}, 0.5},
		{"lowest configured weight", gpu, map[string]fwkdl.Cloneable{"gpu": labelproducer.Text("l4")}, 0.25},
		{"missing value gets the lowest weight, not 0", gpu, nil, 0.25},
		{"unknown value gets the lowest weight", gpu, map[string]fwkdl.Cloneable{"gpu": labelproducer.Text("t4")}, 0.25},
		{"values match case-sensitively", gpu, map[string]fwkdl.Cloneable{"gpu": labelproducer.Text("H100")}, 0.25},
		{"another type under the key counts as missing", gpu, map[string]fwkdl.Cloneable{"gpu": plugintest.Other{}}, 0.25},
		{"another attribute is not read", gpu, map[string]fwkdl.Cloneable{"gpu/labels": labelproducer.Text("h100")}, 0.25},
		{"producer qualifies the key", `{"attributeKey":"gpu","producer":"labels","weights":{"h100":4,"l4":1}}`,
			map[string]fwkdl.Cloneable{"gpu/labels": labelproducer.Text("h100"), "gpu": labelproducer.Text("l4")}, 1},
		{"numeric value in its shortest form", `{"attributeKey":"tier","weights":{"1":3,"0.5":1}}`,
			map[string]fwkdl.Cloneable{"tier": &scalar.Value{V: 1}}, 1},
		{"numeric fraction", `{"attributeKey":"tier","weights":{"1":3,"0.5":1}}`,
			map[string]fwkdl.Cloneable{"tier": &scalar.Value{V: 0.5}}, 1.0 / 3},
		{"a single weight scores everyone 1", `{"attributeKey":"gpu","weights":{"h100":7}}`, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Factory("w", json.RawMessage(tt.params), nil)
			if err != nil {
				t.Fatal(err)
			}
			ep := eptest.Scheduling(eptest.Spec{Name: "p", NoMetrics: true, Attributes: tt.attrs})
			got := p.(*Scorer).Score(context.Background(), nil, nil, []fwksched.Endpoint{ep})[ep]
			if got != tt.want {
				t.Fatalf("score %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParameters(t *testing.T) {
	tests := []struct {
		name, params, wantErr string
	}{
		{"valid", `{"attributeKey":"gpu","weights":{"h100":1}}`, ""},
		{"no parameters", `{}`, "parameter attributeKey: required"},
		{"no attributeKey", `{"weights":{"h100":1}}`, "parameter attributeKey: required"},
		{"no weights", `{"attributeKey":"gpu"}`, "parameter weights: required"},
		{"empty weights", `{"attributeKey":"gpu","weights":{}}`, "parameter weights: required"},
		{"zero weight", `{"attributeKey":"gpu","weights":{"h100":1,"l4":0}}`, `parameter weights["l4"]`},
		{"negative weight", `{"attributeKey":"gpu","weights":{"l4":-1}}`, "must be a positive number"},
		{"weight not a number", `{"attributeKey":"gpu","weights":{"l4":"high"}}`, "weights"},
		{"unknown field", `{"attributeKey":"gpu","weights":{"l4":1},"algorithm":{}}`, "algorithm"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Factory("gpu-weights", json.RawMessage(tt.params), nil)
			plugintest.WantErr(t, err, tt.wantErr, Type, `"gpu-weights"`)
		})
	}
}

func TestTypedNameAndCategory(t *testing.T) {
	s := plugintest.Build[*Scorer](t, Factory, "", `{"attributeKey":"gpu","weights":{"h100":1}}`, nil)
	if s.TypedName().Type != Type || s.TypedName().Name != Type || s.Category() != fwksched.Affinity {
		t.Fatalf("typed name %v, category %v", s.TypedName(), s.Category())
	}
}
