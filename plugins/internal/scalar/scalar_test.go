package scalar

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestRead(t *testing.T) {
	key := Key("GPUUtilization", "dcgm-extractor")
	if key != "GPUUtilization/dcgm-extractor" {
		t.Fatalf("key %q", key)
	}
	cases := []struct {
		name   string
		g      Getter
		want   float64
		wantOK bool
	}{
		{"nil getter", nil, 0, false},
		{"absent", plugintest.Attrs{}, 0, false},
		{"another type", plugintest.Attrs{key: plugintest.Other{}}, 0, false},
		{"nil value", plugintest.Attrs{key: (*Value)(nil)}, 0, false},
		{"present", plugintest.Attrs{key: &Value{V: 0.5}}, 0.5, true},
	}
	for _, tc := range cases {
		if got, ok := Read(tc.g, key); got != tc.want || ok != tc.wantOK {
			t.Errorf("%s: %v %v, want %v %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
	v := &Value{V: 1}
	c := v.Clone().(*Value)
	c.V = 2
	if v.V != 1 || (*Value)(nil).Clone() != nil {
		t.Error("Clone must copy, and keep nil nil")
	}
}

// testParams spell the attribute parameter as endpoint-attribute-scorer does.
type testParams struct {
	AttributeKey string `json:"attributeKey"`
	Producer     string `json:"producer"`
}

func (p *testParams) Source() (string, string, string) {
	return "attributeKey", p.AttributeKey, p.Producer
}

func TestParseReader(t *testing.T) {
	cases := []struct {
		name, raw, want, wantErr string
	}{
		{"both set", `{"attributeKey": "GPUUtilization", "producer": "dcgm-extractor"}`, "GPUUtilization/dcgm-extractor", ""},
		{"no attribute", `{"producer": "dcgm-extractor"}`, "", `endpoint-attribute-scorer "s": parameter attributeKey: required`},
		{"no producer", `{"attributeKey": "GPUUtilization"}`, "", `endpoint-attribute-scorer "s": parameter producer: required`},
		{"no parameters", ``, "", `endpoint-attribute-scorer "s": parameter attributeKey: required`},
		{"unknown field", `{"attribute": "GPUUtilization"}`, "", `endpoint-attribute-scorer "s": invalid parameters`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := ParseReader("endpoint-attribute-scorer", "s", []byte(tc.raw), &testParams{})
			if plugintest.WantErr(t, err, tc.wantErr) {
				return
			}
			if r.Key != tc.want || r.TypedName().String() != "s/endpoint-attribute-scorer" {
				t.Fatalf("key %q name %v, want %q s/endpoint-attribute-scorer", r.Key, r.TypedName(), tc.want)
			}
			if err := r.ParamError("algorithm.type", "bad"); err.Error() != `endpoint-attribute-scorer "s": parameter algorithm.type: bad` {
				t.Fatalf("ParamError: %v", err)
			}
		})
	}
}
