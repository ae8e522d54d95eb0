package topologyfilter

import (
	"context"
	"encoding/json"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// pod builds an endpoint with a topology attribute (host/rack/zone; "" = no attribute) and a
// load (-1 = no metrics).
func pod(name, host, rack, zone string, load int) fwksched.Endpoint {
	spec := eptest.Spec{Name: name, NoMetrics: load < 0}
	if load >= 0 {
		spec.Metrics = &fwkdl.Metrics{RunningRequestsSize: load}
	}
	ep := eptest.Scheduling(spec)
	if host+rack+zone != "" {
		ep.Put(podmodel.TopologyAttributeKey(""), &podmodel.TopologyAttribute{Topology: podmodel.Topology{Hostname: host, Rack: rack, Zone: zone, Region: "eu"}})
	}
	return ep
}

func TestFilter(t *testing.T) {
	decode := pod("d", "h1", "r1", "z1", 0)
	cands := func(loadLocal int) []fwksched.Endpoint {
		return []fwksched.Endpoint{
			pod("p-host", "h1", "r1", "z1", loadLocal),
			pod("p-rack", "h2", "r1", "z1", 0),
			pod("p-zone", "h3", "r2", "z1", 0),
			pod("p-none", "", "", "", 0),
		}
	}
	tests := []struct {
		name   string
		params string
		peer   fwksched.Endpoint
		load   int
		want   string
	}{
		{name: "no peer: fail open", params: `{}`, want: "p-host,p-rack,p-zone,p-none"},
		{name: "peer without topology: fail open", params: `{}`, peer: pod("d", "", "", "", 0), want: "p-host,p-rack,p-zone,p-none"},
		{name: "host (default)", params: `{}`, peer: decode, want: "p-host"},
		{name: "rack", params: `{"minAffinity":"rack"}`, peer: decode, want: "p-host,p-rack"},
		{name: "zone", params: `{"minAffinity":"zone"}`, peer: decode, want: "p-host,p-rack,p-zone"},
		{name: "nothing close: fail open", params: `{}`, peer: pod("d", "h9", "r9", "z9", 0), want: "p-host,p-rack,p-zone,p-none"},
		{name: "required ignores load without an allowance", params: `{}`, peer: decode, load: 50, want: "p-host"},
		{name: "load allowance exceeded: keep all", params: `{"loadAllowance":4}`, peer: decode, load: 5, want: "p-host,p-rack,p-zone,p-none"},
		{name: "load allowance respected", params: `{"loadAllowance":4}`, peer: decode, load: 4, want: "p-host"},
		{name: "preferred: allowance 0", params: `{"mode":"preferred"}`, peer: decode, load: 1, want: "p-host,p-rack,p-zone,p-none"},
		{name: "preferred: local as idle as remote", params: `{"mode":"preferred"}`, peer: decode, load: 0, want: "p-host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := plugintest.Build[*Filter](t, Factory, "f", tt.params, nil)
			cs := fwksched.NewCycleState()
			if tt.peer != nil {
				cs.Write(contract.DecodeResultKey, &contract.StageResult{Profile: "decode", Endpoints: []fwksched.Endpoint{tt.peer}})
			}
			got := f.Filter(context.Background(), cs, &fwksched.LLMRequest{}, cands(tt.load))
			if plugintest.Names(got) != tt.want {
				t.Fatalf("kept %s, want %s", plugintest.Names(got), tt.want)
			}
		})
	}
}

func TestPrefillFirstPeer(t *testing.T) {
	f := New("f", Config{MinAffinity: podmodel.LevelRack, LoadAllowance: -1})
	cs := fwksched.NewCycleState()
	cs.Write(contract.PrefillResultKey, &contract.StageResult{Profile: "prefill", Endpoints: []fwksched.Endpoint{pod("p", "h2", "r2", "z1", 0)}})
	got := f.Filter(context.Background(), cs, nil, []fwksched.Endpoint{pod("d1", "h1", "r1", "z1", 0), pod("d2", "h3", "r2", "z1", 0)})
	if plugintest.Names(got) != "d2" {
		t.Fatalf("kept %s, want d2 (the prefill pick's rack)", plugintest.Names(got))
	}
}

func TestParameters(t *testing.T) {
	tests := []struct{ raw, wantErr string }{
		{`{"minAffinity":"galaxy"}`, "minAffinity"},
		{`{"minAffinity":"none"}`, "minAffinity"},
		{`{"mode":"strict"}`, "mode"},
		{`{"loadAllowance":-1}`, "loadAllowance"},
		{`{"minAfinity":"host"}`, "minAfinity"},
		{`{"minAffinity":"Region","topologyProducerName":"t"}`, ""},
	}
	for _, tt := range tests {
		_, err := ParseParameters("f", json.RawMessage(tt.raw))
		plugintest.WantErr(t, err, tt.wantErr, Type)
	}
}
