package topologyscorer

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func pod(name string, topo podmodel.Topology, producer string) fwksched.Endpoint {
	ep := eptest.Scheduling(eptest.Spec{Name: name, NoMetrics: true})
	if !topo.IsZero() {
		ep.Put(podmodel.TopologyAttributeKey(producer), &podmodel.TopologyAttribute{Topology: topo})
	}
	return ep
}

func TestScore(t *testing.T) {
	peer := podmodel.Topology{Hostname: "h1", Rack: "r1", Zone: "z1", Region: "eu"}
	cands := func(producer string) []fwksched.Endpoint {
		return []fwksched.Endpoint{
			pod("host", peer, producer),
			pod("rack", podmodel.Topology{Hostname: "h2", Rack: "r1", Zone: "z1", Region: "eu"}, producer),
			pod("zone", podmodel.Topology{Hostname: "h3", Rack: "r2", Zone: "z1", Region: "eu"}, producer),
			pod("region", podmodel.Topology{Hostname: "h4", Rack: "r3", Zone: "z2", Region: "eu"}, producer),
			pod("far", podmodel.Topology{Hostname: "h5", Region: "us"}, producer),
			pod("unknown", podmodel.Topology{}, producer),
		}
	}
	tests := []struct {
		name, params, producer string
		peer                   bool
		want                   map[string]float64
	}{
		{name: "llm-d's table", params: `{}`, peer: true,
			want: map[string]float64{"host": 1, "rack": 0.2, "zone": 0.05, "region": 0.02, "far": 0, "unknown": 0}},
		{name: "configured weights", params: `{"weights":{"rack":0.9,"zone":0.5}}`, peer: true,
			want: map[string]float64{"host": 1, "rack": 0.9, "zone": 0.5, "region": 0.02, "far": 0, "unknown": 0}},
		{name: "named producer", params: `{"topologyProducerName":"topo"}`, producer: "topo", peer: true,
			want: map[string]float64{"host": 1, "rack": 0.2, "zone": 0.05, "region": 0.02, "far": 0, "unknown": 0}},
		{name: "no peer: all zero", params: `{}`,
			want: map[string]float64{"host": 0, "rack": 0, "zone": 0, "region": 0, "far": 0, "unknown": 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := plugintest.Build[*Scorer](t, Factory, "s", tt.params, nil)
			cs := fwksched.NewCycleState()
			if tt.peer {
				cs.Write(contract.DecodeResultKey, &contract.StageResult{Endpoints: []fwksched.Endpoint{pod("d", peer, tt.producer)}})
			}
			for ep, s := range sc.Score(context.Background(), cs, nil, cands(tt.producer)) {
				if n := ep.GetMetadata().NamespacedName.Name; s != tt.want[n] {
					t.Errorf("%s scored %v, want %v", n, s, tt.want[n])
				}
			}
		})
	}
}

func TestParameters(t *testing.T) {
	for raw, want := range map[string]string{
		`{"weights":{"host":1.5}}`: "weights.host",
		`{"weights":{"rak":0.1}}`:  "rak",
		`{"weight":{}}`:            "weight",
	} {
		if _, err := ParseParameters("s", json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want one naming %s", raw, err, want)
		}
	}
}
