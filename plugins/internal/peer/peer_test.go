package peer

import (
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestOf(t *testing.T) {
	ep := func(name string) fwksched.Endpoint {
		return eptest.Scheduling(eptest.Spec{Name: name, NoMetrics: true})
	}
	d, p := ep("d"), ep("p")
	cases := []struct {
		name      string
		state     func(cs *fwksched.CycleState)
		wantPeer  fwksched.Endpoint
		wantStage string
	}{
		{"first stage of a cycle", func(*fwksched.CycleState) {}, nil, ""},
		{"decode ran first", func(cs *fwksched.CycleState) {
			cs.Write(contract.DecodeResultKey, &contract.StageResult{Endpoints: []fwksched.Endpoint{d}})
		}, d, "decode"},
		{"prefill ran first", func(cs *fwksched.CycleState) {
			cs.Write(contract.PrefillResultKey, &contract.StageResult{Endpoints: []fwksched.Endpoint{p}})
		}, p, "prefill"},
		{"empty decode result falls back to prefill", func(cs *fwksched.CycleState) {
			cs.Write(contract.DecodeResultKey, &contract.StageResult{})
			cs.Write(contract.PrefillResultKey, &contract.StageResult{Endpoints: []fwksched.Endpoint{p}})
		}, p, "prefill"},
	}
	for _, tc := range cases {
		cs := fwksched.NewCycleState()
		tc.state(cs)
		got, stage := Of(cs)
		if got != tc.wantPeer || stage != tc.wantStage {
			t.Errorf("%s: peer %v stage %q, want %v %q", tc.name, got, stage, tc.wantPeer, tc.wantStage)
		}
	}
	if got, stage := Of(nil); got != nil || stage != "" {
		t.Errorf("nil cycle state: %v %q", got, stage)
	}
}
