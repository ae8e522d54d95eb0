package pluginkit

import (
	"context"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
)

// DebugLogger is ctx's logger (controller-runtime's log.Log when ctx carries none) at GIE's
// debug verbosity, for what a plugin logs on every request. It costs nothing when debug
// logging is off, unlike log.FromContext, which calls WithValues and allocates on every call;
// and a disabled Info still boxes its arguments, so guard per-request calls:
//
//	if logger := pluginkit.DebugLogger(ctx); logger.Enabled() {
//		logger.Info("...", "requestID", req.RequestId)
//	}
func DebugLogger(ctx context.Context) logr.Logger {
	logger, err := logr.FromContext(ctx)
	if err != nil {
		logger = log.Log
	}
	return logger.V(logutil.DEBUG)
}
