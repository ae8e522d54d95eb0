// Command sim is the pdgate model-server simulator (vLLM, SGLang and TensorRT-LLM dialects).
// See cmd/sim/README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/pdgate/pdgate/cmd/internal/telemetry"
	"github.com/pdgate/pdgate/cmd/sim/server"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "sim:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	var opts server.Options
	opts.BindFlags(fs)
	instances := fs.String("instances-file", "", "YAML list of instance options; many instances in one process")
	zopts := zap.Options{}
	zopts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := zap.New(zap.UseFlagOptions(&zopts))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// vLLM's request spans when the standard OTEL_* variables name an endpoint, as a vLLM
	// started with --otlp-traces-endpoint exports them; off (no tracer) otherwise.
	tracing, err := telemetry.Start(ctx, true, "pdgate/sim", "pdgate/sim")
	if err != nil {
		return fmt.Errorf("tracing: %w", err)
	}
	defer func() {
		if err := tracing.Close(5 * time.Second); err != nil {
			logger.Error(err, "flushing spans")
		}
	}()
	if *instances == "" {
		opts.Logger, opts.Tracer = logger, tracing.Tracer()
		return server.RunMany(ctx, server.ExpandDataParallel(opts))
	}
	files, err := server.LoadInstancesFile(*instances)
	if err != nil {
		return err
	}
	var all []server.Options
	for _, o := range files {
		all = append(all, server.ExpandDataParallel(o)...)
	}
	for i := range all {
		all[i].Logger, all[i].Tracer = logger, tracing.Tracer()
	}
	return server.RunMany(ctx, all)
}
