package rolefilter

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func pods() []fwksched.Endpoint {
	roles := []string{"", "encode", "prefill", "decode", "encode-prefill", "prefill-decode", "encode-prefill-decode", "both", "encode-decode", "weird"}
	out := []fwksched.Endpoint{nil}
	for _, r := range roles {
		labels := map[string]string{}
		name := "none"
		if r != "" {
			labels[podmodel.LabelLLMDRole] = r
			name = r
		}
		out = append(out, eptest.Scheduling(eptest.Spec{Name: name, Labels: labels, NoMetrics: true}))
	}
	return out
}

func TestFilters(t *testing.T) {
	tests := []struct {
		typ  string
		want string
	}{
		{DecodeType, "both,decode,encode-prefill-decode,none,prefill-decode"},
		{PrefillType, "both,encode-prefill,encode-prefill-decode,prefill,prefill-decode"},
		{EncodeType, "encode,encode-prefill,encode-prefill-decode"},
	}
	factories := map[string]func(string, json.RawMessage) (*Filter, error){
		DecodeType: func(n string, r json.RawMessage) (*Filter, error) {
			p, err := DecodeFactory(n, r, nil)
			return asFilter(p, err)
		},
		PrefillType: func(n string, r json.RawMessage) (*Filter, error) {
			p, err := PrefillFactory(n, r, nil)
			return asFilter(p, err)
		},
		EncodeType: func(n string, r json.RawMessage) (*Filter, error) {
			p, err := EncodeFactory(n, r, nil)
			return asFilter(p, err)
		},
	}
	for _, tt := range tests {
		t.Run(tt.typ, func(t *testing.T) {
			f, err := factories[tt.typ]("f", nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, ep := range f.Filter(context.Background(), nil, nil, pods()) {
				names = append(names, ep.GetMetadata().NamespacedName.Name)
			}
			sort.Strings(names)
			if strings.Join(names, ",") != tt.want || f.TypedName().Type != tt.typ {
				t.Fatalf("kept %v want %s", names, tt.want)
			}
			if _, err := factories[tt.typ]("f", json.RawMessage(`{}`)); err != nil {
				t.Fatal("empty params must be accepted")
			}
			if _, err := factories[tt.typ]("f", json.RawMessage(`{"x":1}`)); err == nil || !strings.Contains(err.Error(), "takes no parameters") {
				t.Fatalf("params must be rejected: %v", err)
			}
		})
	}
	if _, err := New("x", "y"); err == nil {
		t.Fatal("unknown type")
	}
}

func asFilter(p any, err error) (*Filter, error) {
	if err != nil {
		return nil, err
	}
	return p.(*Filter), nil
}
