// Command epp is pdgate's Endpoint Picker: GIE v1.5.0's EPP with pdgate's plugins, in
// Kubernetes mode (InferencePool + Pods) or standalone mode (--endpoints-file).
package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"

	"github.com/pdgate/pdgate/cmd/epp/runner"
	"github.com/pdgate/pdgate/cmd/internal/gcpacing"
	"github.com/pdgate/pdgate/cmd/internal/telemetry"
)

func main() {
	logutil.InitSetupLogging()
	opts, err := runner.ParseArgs(os.Args[1:])
	if errors.Is(err, pflag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "epp:", err)
		os.Exit(2)
	}
	logutil.InitLogging(&opts.ZapOptions)
	defer gcpacing.Start(gcpacing.Options{MinHeap: uint64(opts.GCMinHeap.Value())}).Stop()
	ctx := ctrl.SetupSignalHandler()
	// --tracing (GIE's flag, on by default) allows spans; the OTEL_* environment turns them on.
	tr, err := telemetry.Start(ctx, opts.Tracing, "pdgate/epp", "pdgate/epp")
	if err != nil {
		fmt.Fprintln(os.Stderr, "epp: tracing:", err)
		os.Exit(1)
	}
	opts.Tracer = tr.Tracer()
	opts.OnListening = func(a runner.Addresses) { fmt.Fprint(os.Stderr, howToTalk(opts, a)) }
	err = runner.Run(ctx, opts)
	if cerr := tr.Close(5 * time.Second); cerr != nil {
		ctrl.Log.Error(cerr, "flushing spans")
	}
	if err != nil {
		ctrl.Log.Error(err, "EPP stopped")
		os.Exit(1)
	}
}

// howToTalk tells a person at a terminal where the EPP listens and how to reach it.
func howToTalk(o *runner.Options, a runner.Addresses) string {
	scheme := "TLS (self-signed unless --cert-path)"
	if !o.SecureServing {
		scheme = "plaintext"
	}
	mode := "kubernetes, pool " + o.PoolNamespace + "/" + o.PoolName
	if o.Standalone() {
		mode = "standalone, endpoints from " + o.EndpointsFile
	}
	return fmt.Sprintf(`
pdgate EPP is up (%s)
  ext_proc gRPC : %s (%s) - point Envoy's ext_proc filter or the dev gateway here:
                  bin/gateway --epp 127.0.0.1:%s --epp-tls=%t --epp-insecure-skip-verify
  gRPC health   : %s (grpc_health_v1, service "envoy.service.ext_proc.v3.ExternalProcessor")
  metrics       : http://127.0.0.1:%s/metrics
  decision trace: %s
`, mode, a.GRPC, scheme, port(a.GRPC), o.SecureServing, a.Health, port(a.Metrics), traceHint(o))
}

func traceHint(o *runner.Options) string {
	if o.DecisionTrace {
		return "send 'x-pdgate-trace: 1' to get the x-pdgate-decision response header"
	}
	return "off (--decision-trace to allow x-pdgate-trace: 1)"
}

func port(addr string) string {
	if _, p, err := net.SplitHostPort(addr); err == nil {
		return p
	}
	return addr
}
