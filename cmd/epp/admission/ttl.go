package admission

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
)

// InferenceTTLHeader is llm-d v0.11's per-request queue TTL: a Go duration the client sends to
// say how long it will wait in flow control's queue.
const InferenceTTLHeader = "x-llm-d-inference-ttl"

// queueDeadline bounds ctx by the request's x-llm-d-inference-ttl, so that flow control's queue
// TTL becomes the minimum of its own (the configured defaultRequestTTL) and the client's: GIE's
// flow controller derives each queued request's deadline from the context it is given, and
// reads a parent's expired deadline as a TTL expiry (429 rejected-ttl-expired), as llm-d does.
// A value that does not parse or is not > 0 is ignored, as llm-d ignores it (debug log). A
// client's TTL also applies when no queue TTL is configured: it is the client saying how long
// it will wait, and a request past it is one nobody is waiting for.
func queueDeadline(ctx context.Context, reqCtx *handlers.RequestContext, logger logr.Logger) (context.Context, context.CancelFunc) {
	if reqCtx == nil || reqCtx.Request == nil {
		return ctx, func() {}
	}
	v, ok := reqCtx.Request.Headers[InferenceTTLHeader]
	if !ok {
		return ctx, func() {}
	}
	ttl, err := time.ParseDuration(v)
	if err != nil || ttl <= 0 {
		logger.V(1).Info("ignoring x-llm-d-inference-ttl: not a positive Go duration", "value", v)
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, ttl)
}
