package precisecache

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

	"github.com/pdgate/pdgate/plugins/precise/kvevents"
	kvwire "github.com/pdgate/pdgate/plugins/wire/kvevents"
)

func TestSourceOf(t *testing.T) {
	tests := []struct {
		name, addr, port string
		want             kvevents.SourceKey
	}{
		{"pod-a", "10.0.0.1", "8000", kvevents.SourceKey{Endpoint: "10.0.0.1:8000"}},
		{"pod-a-rank-3", "10.0.0.1", "8003", kvevents.SourceKey{Endpoint: "10.0.0.1:8003", Rank: 3}},
		{"pod-rank-x", "10.0.0.1", "8000", kvevents.SourceKey{Endpoint: "10.0.0.1:8000"}},
		{"v6", "fd00::1", "8000", kvevents.SourceKey{Endpoint: "[fd00::1]:8000"}},
	}
	for _, tc := range tests {
		got, _ := sourceOf(&fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Name: tc.name}, Address: tc.addr, Port: tc.port})
		if got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// An endpoint leaving the pool (endpoint-notification-source's delete) takes its blocks with it.
func TestEndpointDeleteForgetsBlocks(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, r, err := kvevents.ParseConfig("test", "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := New(ctx, "test", r, true)
	meta := &fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Name: "pod-a"}, Address: "127.0.0.1", Port: "1"}
	ep := fwkdl.NewEndpoint(meta, nil)
	if err := c.ExtractEndpoint(ctx, fwkdl.EndpointEvent{Type: fwkdl.EventAddOrUpdate, Endpoint: ep}); err != nil {
		t.Fatal(err)
	}
	if !c.Subscribers().Has("127.0.0.1:1") {
		t.Fatal("no subscriber for an added endpoint")
	}
	tokens := make([]uint32, 32)
	c.Index().Apply(kvevents.SourceKey{Endpoint: "127.0.0.1:1"}, []kvwire.Event{{Kind: kvwire.KindStored, Hashes: []uint64{1, 2}, Tokens: tokens, BlockSize: 16}})
	if err := c.ExtractEndpoint(ctx, fwkdl.EndpointEvent{Type: fwkdl.EventDelete, Endpoint: ep}); err != nil {
		t.Fatal(err)
	}
	if c.Subscribers().Has("127.0.0.1:1") || c.Index().Holds(kvevents.SourceKey{Endpoint: "127.0.0.1:1"}) != 0 {
		t.Fatal("a removed endpoint kept its subscriber or its blocks")
	}
}
