package aibrixrolesetfilter

import (
	"context"
	"sort"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func ep(name string, labels map[string]string) fwksched.Endpoint {
	return eptest.Scheduling(eptest.Spec{Namespace: "ns", Name: name, PodName: name, Labels: labels})
}

func names(eps []fwksched.Endpoint) string {
	var out []string
	for _, e := range eps {
		out = append(out, e.GetMetadata().PodName)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func TestFilter(t *testing.T) {
	pods := []fwksched.Endpoint{
		ep("a-p", map[string]string{"role-name": "prefill", "roleset-name": "a"}),
		ep("a-d", map[string]string{"role-name": "decode", "roleset-name": "a"}),
		ep("b-p", map[string]string{"role-name": "prefill", "roleset-name": "b"}),
		ep("b-d", map[string]string{"role-name": "decode", "roleset-name": "b"}),
		ep("c-p", map[string]string{"role-name": "prefill", "roleset-name": "c"}),
		ep("f-d", map[string]string{"role-name": "decode", "roleset-name": "a", "stormservice.orchestration.aibrix.ai/pod-group-index": "1"}),
		ep("llmd", map[string]string{"llm-d.ai/role": "decode"}),
	}
	tests := []struct {
		name   string
		params string
		decode fwksched.Endpoint
		want   string
	}{
		{"drops followers and incomplete rolesets", ``, nil, "a-d,a-p,b-d,b-p,llmd"},
		{"same roleset as the decode pick", `{"sameRolesetAsDecode":true}`, pods[3], "b-d,b-p"},
		{"decode pick without roleset keeps all", `{"sameRolesetAsDecode":true}`, pods[6], "a-d,a-p,b-d,b-p,llmd"},
		{"decode result ignored unless asked", ``, pods[3], "a-d,a-p,b-d,b-p,llmd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl, err := Factory("f", []byte(tt.params), nil)
			if err != nil {
				t.Fatal(err)
			}
			cs := fwksched.NewCycleState()
			if tt.decode != nil {
				cs.Write(contract.DecodeResultKey, &contract.StageResult{Profile: "decode", Endpoints: []fwksched.Endpoint{tt.decode}})
			}
			if got := names(pl.(*Filter).Filter(context.Background(), cs, nil, pods)); got != tt.want {
				t.Fatalf("got %s want %s", got, tt.want)
			}
		})
	}
	if _, err := Factory("f", []byte(`{"bogus":true}`), nil); err == nil || !strings.Contains(err.Error(), Type) {
		t.Fatalf("unknown field must fail: %v", err)
	}
}
