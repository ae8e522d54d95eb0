package podmodel

import (
	"reflect"
	"testing"

	"github.com/go-logr/logr"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// The cache answers what FromEndpoints and FromEndpoint answer, for every kind of pod, the nil
// endpoint and endpoints without metadata included, on the first request and on the next.
func TestCacheMatchesFromEndpoints(t *testing.T) {
	eps := []fwksched.Endpoint{
		fwksched.NewEndpoint(meta("p0", map[string]string{LabelRoleName: "prefill", LabelRolesetName: "rs0", LabelEngine: "sglang",
			LabelPort: "9000", protocol.AnnotationLabelPrefix + AnnotationBootstrap: "9100"}), nil, nil),
		fwksched.NewEndpoint(meta("d0", map[string]string{LabelLLMDRole: "decode", LabelKVConnectorType: "foo", LabelPort: "0"}), nil, nil),
		fwksched.NewEndpoint(meta("c0", map[string]string{cfgAnn: `{"profiles":{"default":{"routingConfig":{"combined":true}}}}`}), nil, nil),
		fwksched.NewEndpoint(meta("bad", map[string]string{cfgAnn: "{"}), nil, nil),
		fwksched.NewEndpoint(nil, nil, nil),
		nil,
	}
	want := FromEndpoints(logr.Discard(), eps)
	var c Cache
	for round := range 2 {
		if got := c.FromEndpoints(logr.Discard(), eps); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: cache resolved\n%+v\nwant\n%+v", round, got, want)
		}
		for i, ep := range eps {
			if got := c.FromEndpoint(logr.Discard(), ep); !reflect.DeepEqual(got, FromEndpoint(ep)) {
				t.Fatalf("round %d: endpoint %d resolved %+v, want %+v", round, i, got, FromEndpoint(ep))
			}
		}
	}
}

// A pod's change is a new metadata object: the cache resolves it anew rather than answering
// with what the pod's old labels said.
func TestCacheFollowsNewMetadata(t *testing.T) {
	var c Cache
	old := meta("p", map[string]string{LabelRoleName: "prefill", LabelRolesetName: "rs0"})
	if got := c.FromEndpoints(logr.Discard(), []fwksched.Endpoint{fwksched.NewEndpoint(old, nil, nil)}); got[0].Role != RolePrefill {
		t.Fatalf("role %q, want prefill", got[0].Role)
	}
	changed := meta("p", map[string]string{LabelRoleName: "decode", LabelRolesetName: "rs0"})
	if got := c.FromEndpoints(logr.Discard(), []fwksched.Endpoint{fwksched.NewEndpoint(changed, nil, nil)}); got[0].Role != RoleDecode {
		t.Fatalf("role %q after the pod changed, want decode", got[0].Role)
	}
}

// Once a fleet's metadata is resolved, a request's pods cost one allocation, their slice;
// FromEndpoints builds every pod's key string again.
func TestCacheAllocations(t *testing.T) {
	var eps []fwksched.Endpoint
	for _, name := range []string{"p0", "p1", "d0", "d1"} {
		eps = append(eps, fwksched.NewEndpoint(meta(name, map[string]string{LabelRoleName: "prefill", LabelRolesetName: "rs0"}), nil, nil))
	}
	var c Cache
	c.FromEndpoints(logr.Discard(), eps)
	if n := testing.AllocsPerRun(100, func() { c.FromEndpoints(logr.Discard(), eps) }); n != 1 {
		t.Fatalf("cached resolution allocated %v times, want 1 (the slice)", n)
	}
}

// The cache starts over past its bound instead of holding every metadata object a churning
// fleet ever published.
func TestCacheBound(t *testing.T) {
	var c Cache
	for i := range cacheLimit + 10 {
		c.of(logr.Discard(), meta("p", map[string]string{LabelRolesetName: string(rune('a' + i%26))}))
	}
	n := 0
	c.m.Range(func(_, _ any) bool { n++; return true })
	if n > cacheLimit {
		t.Fatalf("cache holds %d entries, bound %d", n, cacheLimit)
	}
}
