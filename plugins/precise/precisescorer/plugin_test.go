package precisescorer

import (
	"context"
	"encoding/json"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"
	approx "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/precise/internal/precisecache"
	"github.com/pdgate/pdgate/plugins/precise/preciseproducer"
)

func handle(t *testing.T) fwkplugin.Handle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return plugintest.Handle(ctx)
}

func TestBindingAndApproximateProducers(t *testing.T) {
	tests := []struct {
		name          string
		withProducer  bool
		wantBound     bool
		wantProducesM bool
	}{
		{name: "alone: own index, produces the match attributes, approx dropped", withProducer: false, wantBound: false, wantProducesM: true},
		{name: "next to a producer: reads it, produces nothing", withProducer: true, wantBound: true, wantProducesM: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := handle(t)
			ap, err := approx.ApproxPrefixCacheFactory(approx.ApproxPrefixCachePluginType, nil, h)
			if err != nil {
				t.Fatal(err)
			}
			h.AddPlugin(approx.ApproxPrefixCachePluginType, ap)
			if tc.withProducer {
				p, err := preciseproducer.Factory("ppc", json.RawMessage(`{}`), h)
				if err != nil {
					t.Fatal(err)
				}
				h.AddPlugin("ppc", p)
			}
			sp, err := Factory("scorer", json.RawMessage(`{"indexerConfig":{"tokenizersPoolConfig":{"modelName":"m"}}}`), h)
			if err != nil {
				t.Fatal(err)
			}
			h.AddPlugin("scorer", sp)
			s := sp.(*Scorer)
			for _, p := range h.GetAllPlugins() {
				if r, ok := p.(interface{ ResolveReferences(fwkplugin.Handle) error }); ok {
					if err := r.ResolveReferences(h); err != nil {
						t.Fatal(err)
					}
				}
			}
			if (s.BoundTo() != "") != tc.wantBound {
				t.Fatalf("bound to %q", s.BoundTo())
			}
			_, produces := s.Produces()[attrprefix.PrefixCacheMatchInfoKey]
			if produces != tc.wantProducesM {
				t.Fatalf("produces PrefixCacheMatchInfo = %v", produces)
			}
			if _, ok := s.Consumes()[precisecache.MatchInfoKey]; ok != tc.wantBound {
				t.Fatalf("consumes the producer's match = %v", ok)
			}
			if h.Plugin(approx.ApproxPrefixCachePluginType) != nil {
				t.Fatal("the approximate producer was kept next to a precise one")
			}
		})
	}
}

// May 2026's wiring: the scorer listed as an extractor of endpoint-notification-source. Alone, it
// follows each endpoint the source reports through its own index's subscribers; next to a
// producer, the producer does, and the scorer ignores the events.
func TestEndpointNotificationExtractor(t *testing.T) {
	for _, withProducer := range []bool{false, true} {
		h := handle(t)
		if withProducer {
			p, err := preciseproducer.Factory("ppc", json.RawMessage(`{}`), h)
			if err != nil {
				t.Fatal(err)
			}
			h.AddPlugin("ppc", p)
		}
		sp, err := Factory("scorer", json.RawMessage(`{}`), h)
		if err != nil {
			t.Fatal(err)
		}
		h.AddPlugin("scorer", sp)
		s := sp.(*Scorer)
		if err := s.ResolveReferences(h); err != nil {
			t.Fatal(err)
		}
		var x fwkdl.EndpointExtractor = s
		if x.ExpectedInputType() != fwkdl.EndpointEventReflectType {
			t.Fatalf("input type %v", x.ExpectedInputType())
		}
		meta := &fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "pod-a"}, Address: "127.0.0.1", Port: "8000"}
		ep := fwkdl.NewEndpoint(meta, nil)
		if err := x.ExtractEndpoint(context.Background(), fwkdl.EndpointEvent{Type: fwkdl.EventAddOrUpdate, Endpoint: ep}); err != nil {
			t.Fatal(err)
		}
		following := s.own != nil && s.own.Subscribers().Has("127.0.0.1:8000")
		if following == withProducer {
			t.Fatalf("withProducer=%v: scorer follows the endpoint = %v", withProducer, following)
		}
		if err := x.ExtractEndpoint(context.Background(), fwkdl.EndpointEvent{Type: fwkdl.EventDelete, Endpoint: ep}); err != nil {
			t.Fatal(err)
		}
		if s.own != nil && s.own.Subscribers().Has("127.0.0.1:8000") {
			t.Fatal("the scorer still follows an endpoint that left the pool")
		}
	}
}
