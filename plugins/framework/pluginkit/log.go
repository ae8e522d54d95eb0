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
	return Logger(ctx).V(logutil.DEBUG)
}

// Logger is ctx's logger, or controller-runtime's log.Log when ctx carries none, without
// log.FromContext's WithValues allocation: for a plugin that may log an error on every request.
func Logger(ctx context.Context) logr.Logger {
	if logger, err := logr.FromContext(ctx); err == nil {
		return logger
	}
	return log.Log
}
