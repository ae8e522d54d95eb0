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

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

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
	if *instances == "" {
		opts.Logger = logger
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
		all[i].Logger = logger
	}
	return server.RunMany(ctx, all)
}
