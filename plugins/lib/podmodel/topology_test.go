package podmodel

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
)

func TestTopologyOf(t *testing.T) {
	tests := []struct {
		name   string
		labels map[string]string
		names  TopologyLabels
		want   Topology
	}{
		{name: "well-known labels", labels: map[string]string{TopologyHostnameLabel: "h1", TopologyRackLabel: "r1", TopologyZoneLabel: "z1", TopologyRegionLabel: "eu"},
			want: Topology{Hostname: "h1", Rack: "r1", Zone: "z1", Region: "eu"}},
		{name: "override wins per level", labels: map[string]string{TopologyHostnameLabel: "h1", OverrideHostnameLabel: "node-7", TopologyZoneLabel: "z1"},
			want: Topology{Hostname: "node-7", Zone: "z1"}},
		{name: "configured label names", labels: map[string]string{"example.com/rack": "r9", TopologyRackLabel: "ignored"},
			names: TopologyLabels{Rack: "example.com/rack"}, want: Topology{Rack: "r9"}},
		{name: "nothing", labels: map[string]string{"app": "x"}, want: Topology{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := TopologyOf(tt.labels, tt.names); got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCompareTopology(t *testing.T) {
	a := Topology{Hostname: "h1", Rack: "r1", Zone: "z1", Region: "eu"}
	tests := []struct {
		name string
		b    Topology
		want Level
	}{
		{"same host", Topology{Hostname: "h1", Rack: "r1", Zone: "z1", Region: "eu"}, LevelHost},
		{"same rack", Topology{Hostname: "h2", Rack: "r1", Zone: "z1", Region: "eu"}, LevelRack},
		{"same zone", Topology{Hostname: "h2", Rack: "r2", Zone: "z1", Region: "eu"}, LevelZone},
		{"same region", Topology{Hostname: "h2", Rack: "r2", Zone: "z2", Region: "eu"}, LevelRegion},
		{"nothing shared", Topology{Hostname: "h2", Region: "us"}, LevelNone},
		{"empty never matches empty", Topology{}, LevelNone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CompareTopology(a, tt.b); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
	if got := CompareTopology(Topology{Rack: "r1"}, Topology{Rack: "r1"}); got != LevelRack {
		t.Fatalf("hostnames both empty must not match: got %v", got)
	}
}

func TestRankOf(t *testing.T) {
	md := func(name, pod string, labels map[string]string) *fwkdl.EndpointMetadata {
		return &fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Name: name}, PodName: pod, Labels: labels}
	}
	tests := []struct {
		name   string
		md     *fwkdl.EndpointMetadata
		want   int
		wantOK bool
	}{
		{"GIE rank endpoint", md("vllm-0-rank-3", "vllm-0", nil), 3, true},
		{"label wins", md("vllm-0-rank-3", "vllm-0", map[string]string{DPRankLabel: "5"}), 5, true},
		{"invalid label", md("p", "p", map[string]string{DPRankLabel: "x"}), 0, false},
		{"pod named like a rank", md("a-rank-1", "a-rank-1", nil), 0, false},
		{"no rank", md("p", "p", nil), 0, false},
		{"nil", nil, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := RankOf(tt.md)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("got %d,%v want %d,%v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}
