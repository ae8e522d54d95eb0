package pluginkit

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

type key struct{}

// nilCtxHandle is a handle whose Context() is nil, as a hand-built test handle may be.
type nilCtxHandle struct{ fwkplugin.Handle }

func (nilCtxHandle) Context() context.Context { return nil }

func TestContext(t *testing.T) {
	ctx := context.WithValue(context.Background(), key{}, "epp")
	tests := []struct {
		name string
		h    fwkplugin.Handle
		want any // the key's value in the returned context
	}{
		{name: "handle context", h: fwkplugin.NewEppHandle(ctx, func() []types.NamespacedName { return nil }), want: "epp"},
		{name: "no handle", h: nil, want: nil},
		{name: "handle without context", h: nilCtxHandle{}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Context(tt.h)
			if got == nil {
				t.Fatal("nil context")
			}
			if v := got.Value(key{}); v != tt.want {
				t.Fatalf("value %v, want %v", v, tt.want)
			}
		})
	}
}
