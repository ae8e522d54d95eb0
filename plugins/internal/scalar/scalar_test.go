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

func TestReaderKey(t *testing.T) {
	cases := []struct {
		name, attribute, producer, want, wantErr string
	}{
		{"both set", "GPUUtilization", "dcgm-extractor", "GPUUtilization/dcgm-extractor", ""},
		{"no attribute", "", "dcgm-extractor", "", `endpoint-attribute-scorer "s": parameter attributeKey: required`},
		{"no producer", "GPUUtilization", "", "", `endpoint-attribute-scorer "s": parameter producer: required`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReaderKey("endpoint-attribute-scorer", "s", "attributeKey", tc.attribute, tc.producer)
			if plugintest.WantErr(t, err, tc.wantErr) {
				return
			}
			if got != tc.want {
				t.Fatalf("key %q, want %q", got, tc.want)
			}
		})
	}
}
