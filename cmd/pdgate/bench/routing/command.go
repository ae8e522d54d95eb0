// Package routing is `pdgate bench routing`: routing quality of every policy on the lab (real
// simulators, sidecars, EPP and dev gateway) replaying the Azure LLM inference trace at
// several loads and a synthetic mix, with TTFT/TPOT/E2E percentiles, SLO goodput, plots and
// the two routing goals (docs/benchmarks.md).
package routing

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
)

// Defaults of the full and the quick (--quick, make bench) variants.
var (
	DefaultOptions = Options{
		Out: "bench-results/routing", BinDir: "bin", ConfigDir: "config/bench/routing",
		AzureConv: workload.DefaultAzureConvPath, TraceOffset: 15900, Requests: 150, MixedRequests: 150,
		MooncakeEvery: 20, MooncakeRequests: 120, MooncakeLoad: 0.5,
		Loads: []float64{0.5, 0.8, 1.0}, MixedLoad: 0.8, TimeScale: 0.5, Gap: 2 * time.Second,
		SLO: SLO{TTFT: 500 * time.Millisecond, TPOT: 50 * time.Millisecond}, Seed: 1, Subnet: "127.0.78",
	}
)

// NewCommand returns `pdgate bench routing`.
func NewCommand() *cobra.Command {
	o := DefaultOptions
	o.Loads = append([]float64(nil), DefaultOptions.Loads...)
	var slos string
	cmd := &cobra.Command{
		Use:   "routing",
		Short: "Routing quality: every policy on the lab replaying the Azure trace at 50/80/100 % load and a synthetic mix",
		Long: `routing starts the lab (bin/sim with the calibrated cost model, bin/sidecar, bin/epp,
bin/gateway) once per policy and replays, through the same gateway, a mixed phase (short
chat, long RAG, multi-turn sessions) and the Azure LLM inference conversation trace at each
load, a load being a share of the P/D fleet's capacity derived from the cost model. It reports
TTFT, TPOT and E2E p50/p90/p99 (model time) and SLO goodput per policy and phase, plots, and
the two routing goals. --quick (make bench) runs least-request, recommended and combined-only
at 80 % load only.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Quick {
				f := cmd.Flags()
				if !f.Changed("policies") {
					o.Policies = QuickPolicies
				}
				if !f.Changed("loads") {
					o.Loads = []float64{0.8}
				}
			}
			if o.Routers < 1 || o.Routers > 8 {
				return fmt.Errorf("--routers must be between 1 and 8, got %d", o.Routers)
			}
			if slos != "" {
				s, err := report.ParseSLOs(slos)
				if err != nil {
					return fmt.Errorf("--slos: %w", err)
				}
				o.SLOs = s
			}
			o.Err = cmd.ErrOrStderr()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			md, err := Run(ctx, o)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "report: %s\n", md)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", o.Out, "report directory (JSON, Markdown, PNG plots, lab logs under runs/)")
	f.BoolVar(&o.Quick, "quick", false, "short variant (make bench): least-request, recommended, combined-only, azure at 80 % load and the mix")
	f.StringVar(&o.BinDir, "bin-dir", o.BinDir, "directory with sim, sidecar, epp and gateway (make build)")
	f.StringVar(&o.ConfigDir, "config-dir", o.ConfigDir, "directory with pd.yaml, combined.yaml and the policies' EndpointPickerConfigs")
	f.StringVar(&o.AzureConv, "azure-conv", o.AzureConv, "Azure LLM inference conversation trace (conv.csv)")
	f.IntVar(&o.TraceOffset, "trace-offset", o.TraceOffset, "first trace row of the replayed slice")
	f.IntVar(&o.Requests, "requests", o.Requests, "trace rows per azure phase")
	f.IntVar(&o.MixedRequests, "mixed-requests", o.MixedRequests, "requests of the mixed phase")
	f.Float64SliceVar(&o.Loads, "loads", o.Loads, "azure phases' loads as fractions of the P/D fleet's capacity (quick: 0.8; 0 = no azure phase)")
	f.Float64Var(&o.MixedLoad, "mixed-load", o.MixedLoad, "mixed phase's load (0 = no mixed phase)")
	f.StringVar(&o.Mooncake, "mooncake", "", "also replay a slice of a Mooncake trace JSONL (e.g. "+workload.DefaultMooncakePath+"; default: no mooncake phase)")
	f.IntVar(&o.MooncakeEvery, "mooncake-every", o.MooncakeEvery, "keep every n-th conversation of the Mooncake trace (whole conversations, so a short slice keeps its follow-up turns)")
	f.IntVar(&o.MooncakeOffset, "mooncake-offset", o.MooncakeOffset, "first row of the replayed Mooncake slice (of the kept conversations' rows)")
	f.IntVar(&o.MooncakeRequests, "mooncake-requests", o.MooncakeRequests, "rows of the Mooncake slice")
	f.Float64Var(&o.MooncakeLoad, "mooncake-load", o.MooncakeLoad, "mooncake phase's load (a fraction of the P/D fleet's capacity for the slice)")
	f.StringSliceVar(&o.Policies, "policies", nil, "policies to run (default all; quick: least-request,recommended,combined-only)")
	f.Float64Var(&o.TimeScale, "time-scale", o.TimeScale, "simulator model seconds per wall second")
	f.DurationVar(&o.Gap, "phase-gap", o.Gap, "idle model time after each phase")
	f.DurationVar(&o.SLO.TTFT, "slo-ttft", o.SLO.TTFT, "goodput's time-to-first-token objective (model time)")
	f.DurationVar(&o.SLO.TPOT, "slo-tpot", o.SLO.TPOT, "goodput's time-per-output-token objective (model time)")
	f.StringVar(&slos, "slos", "", "named goodput SLOs, name=TTFT/TPOT,... (default: interactive and relaxed derived from the cost profile)")
	f.Int64Var(&o.Seed, "seed", o.Seed, "seed of prompts and arrivals")
	f.StringVar(&o.Subnet, "subnet", o.Subnet, "first three octets of the labs' loopback addresses")
	f.IntVar(&o.Routers, "routers", 1, "EPP replicas per lab, each with its own gateway and no shared state; requests go round-robin over them")
	return cmd
}
