package pluginkit

import (
	"context"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// DebugLogger logs ctx's logger's lines at debug verbosity and none below it, and fetching
// it allocates nothing.
func TestDebugLogger(t *testing.T) {
	for _, tc := range []struct {
		verbosity int
		want      int
	}{{0, 0}, {3, 0}, {4, 1}} {
		var logged []string
		ctx := logr.NewContext(context.Background(), funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{Verbosity: tc.verbosity}))
		if logger := DebugLogger(ctx); logger.Enabled() {
			logger.Info("request", "requestID", "r1")
		}
		if len(logged) != tc.want {
			t.Fatalf("verbosity %d: logged %q, want %d lines", tc.verbosity, logged, tc.want)
		}
		if n := testing.AllocsPerRun(100, func() { _ = DebugLogger(ctx).Enabled() }); n != 0 {
			t.Fatalf("verbosity %d: DebugLogger allocated %v times", tc.verbosity, n)
		}
	}
	if DebugLogger(context.Background()).GetSink() == nil {
		t.Fatal("no logger without one in the context")
	}
}
