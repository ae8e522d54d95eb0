// Command gateway is pdgate's dev gateway: an HTTP reverse proxy that calls the EPP over
// ext_proc exactly as Envoy does. It stands in for Envoy in development and tests.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/zapr"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/pdgate/pdgate/cmd/gateway/proxy"
)

func main() {
	opts := proxy.DefaultOptions()
	verbose := 0
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "pdgate dev gateway: an ext_proc client of the EPP standing in for Envoy",
		Long: `gateway is a development stand-in for Envoy. It is NOT a production gateway:
production uses a real Gateway API implementation (Envoy Gateway, kgateway, Istio, GKE, ...)
with the EPP attached through an InferencePool.

For each HTTP request it opens an ext_proc stream to the EPP the way Envoy does (request
headers with pseudo-headers, then the body in FULL_DUPLEX_STREAMED chunks), applies the
EPP's header and body mutations, forwards to x-gateway-destination-endpoint (or the envoy.lb
metadata), falling through to the next listed endpoint when a connect fails, and passes the
response headers and body (SSE chunk by chunk) back through the EPP. ImmediateResponses reach
the client as sent. When the EPP fails it answers 503 (--failure-mode=close, the default) or
forwards to --default-backend (--failure-mode=open).`,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			zc := zap.NewProductionConfig()
			zc.Level = zap.NewAtomicLevelAt(zapcore.Level(-verbose)) // logr V(n) is zap level -n
			zl, err := zc.Build()
			if err != nil {
				return fmt.Errorf("building the logger: %w", err)
			}
			defer func() { _ = zl.Sync() }()
			opts.Logger = zapr.NewLogger(zl)
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return proxy.Run(ctx, opts)
		},
	}
	opts.BindFlags(cmd.Flags())
	cmd.Flags().IntVarP(&verbose, "v", "v", 0, "log verbosity (0 info, 1+ debug)")
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}
