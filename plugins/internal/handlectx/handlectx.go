// Package handlectx gives plugin factories the EPP handle's context (its logger and its
// lifetime), or context.Background() when a test or a tool builds a plugin without a handle
// or the handle carries no context.
package handlectx

import (
	"context"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

// Of returns h's context, or context.Background() when h or its context is nil.
func Of(h fwkplugin.Handle) context.Context {
	if h != nil {
		if ctx := h.Context(); ctx != nil {
			return ctx
		}
	}
	return context.Background()
}
