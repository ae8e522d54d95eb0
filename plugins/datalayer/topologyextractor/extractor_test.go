package topologyextractor

import (
	"context"
	"encoding/json"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestPrepareRequestData(t *testing.T) {
	ep := func(labels map[string]string) fwksched.Endpoint {
		return eptest.Scheduling(eptest.Spec{Name: "p", Labels: labels, NoMetrics: true})
	}
	tests := []struct {
		name, params, instance string
		labels                 map[string]string
		want                   podmodel.Topology
		wantAttr               bool
	}{
		{name: "well-known labels", params: `{}`, instance: "topology-extractor",
			labels: map[string]string{"kubernetes.io/hostname": "n1", "topology.kubernetes.io/zone": "z1", "topology.kubernetes.io/region": "eu"},
			want:   podmodel.Topology{Hostname: "n1", Zone: "z1", Region: "eu"}, wantAttr: true},
		{name: "configured labels and instance name", params: `{"rack":"example.com/rack"}`, instance: "topo",
			labels: map[string]string{"example.com/rack": "r3"}, want: podmodel.Topology{Rack: "r3"}, wantAttr: true},
		{name: "override label", params: `{}`, instance: "topology-extractor",
			labels: map[string]string{"kubernetes.io/hostname": "n1", "topology.pdgate.io/hostname": "lab-host-2"}, want: podmodel.Topology{Hostname: "lab-host-2"}, wantAttr: true},
		{name: "no topology: no attribute", params: `{}`, instance: "topology-extractor", labels: map[string]string{"app": "x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Factory(tt.instance, json.RawMessage(tt.params), nil)
			if err != nil {
				t.Fatal(err)
			}
			e := ep(tt.labels)
			if err := p.(*Extractor).PrepareRequestData(context.Background(), nil, []fwksched.Endpoint{e}); err != nil {
				t.Fatal(err)
			}
			got, ok := podmodel.TopologyFromAttributes(e, tt.instance)
			if ok != tt.wantAttr || got != tt.want {
				t.Fatalf("got %+v,%v want %+v,%v", got, ok, tt.want, tt.wantAttr)
			}
			if _, ok := p.(*Extractor).Produces()[podmodel.TopologyAttributeKey(tt.instance)]; !ok {
				t.Fatal("Produces does not declare the instance's key")
			}
		})
	}
}

func TestUnknownParameter(t *testing.T) {
	if _, err := Factory("t", json.RawMessage(`{"host":"x"}`), nil); err == nil {
		t.Fatal("unknown parameter accepted")
	}
}
