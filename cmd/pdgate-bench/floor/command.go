package floor

import (
	"fmt"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/pdgate/pdgate/cmd/internal/gcpacing"
)

// NewCommand is `pdgate-bench floor-epp`, the process pdgate-bench epp starts for its "floor"
// config (eppharness.KindFloor). Its flags mirror the EPP's listener flags.
func NewCommand() *cobra.Command {
	var o Options
	var minHeap resource.QuantityValue
	minHeap.Quantity = *resource.NewQuantity(gcpacing.DefaultMinHeap, resource.BinarySI)
	cmd := &cobra.Command{
		Use:   "floor-epp",
		Short: "The ext_proc protocol's floor: answers the EPP's exchange, routes every request to the first endpoint, decides nothing",
		Long: `floor-epp serves the ext_proc exchange pdgate's EPP serves (request headers, the body in
full-duplex streamed frames returned in GIE's chunks, the response phase echoed) and sets
x-gateway-destination-endpoint to the first of --endpoints for every request. pdgate-bench epp
runs it as the "floor" config, so each EPP's CPU per request can be read as a multiple of what
the protocol alone costs with the same gRPC library and frames.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			if minHeap.Sign() < 0 {
				return fmt.Errorf("--gc-min-heap %s: want >= 0", minHeap.String())
			}
			// The EPP's pacing (bin/epp --gc-min-heap), so that the floor and the EPPs it is
			// compared with collect on the same terms.
			defer gcpacing.Start(gcpacing.Options{MinHeap: uint64(minHeap.Value())}).Stop()
			return Run(ctx, o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.GRPCPort, "grpc-port", 9002, "ext_proc gRPC port (plaintext)")
	f.IntVar(&o.HealthPort, "grpc-health-port", 9003, "gRPC health port")
	f.IntVar(&o.MetricsPort, "metrics-port", 9090, "metrics port (GIE's per-pod series, one per endpoint)")
	f.StringSliceVar(&o.Endpoints, "endpoints", nil, "pods as host:port; every request goes to the first")
	f.Var(&minHeap, "gc-min-heap", "heap the garbage collector lets the floor grow to before it collects, as bin/epp's flag of the same name (0: Go's default pacing)")
	return cmd
}
