// Command sidecar is pdgate's routing sidecar: it runs in front of the decode engine on every
// decode pod and performs the encode and prefill legs the EPP's headers ask for.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/pdgate/pdgate/cmd/sidecar/app"
)

func main() {
	opts := app.NewOptions()
	fs := flag.NewFlagSet("sidecar", flag.ExitOnError)
	opts.BindFlags(fs)
	zopts := zap.Options{}
	zopts.BindFlags(fs)
	fs.Usage = func() { app.Usage(fs) }
	_ = fs.Parse(os.Args[1:])
	opts.Logger = zap.New(zap.UseFlagOptions(&zopts))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "sidecar:", err)
		os.Exit(1)
	}
}
