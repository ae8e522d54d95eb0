package cli

import "github.com/spf13/cobra"

var benchSubcommands commandSet

// RegisterBench adds a `pdgate bench <name>` subcommand constructor. Each benchmark adds
// itself from its own file in this package (bench_<name>.go), so benchmarks land without
// touching each other.
func RegisterBench(newCommand func() *cobra.Command) { benchSubcommands.add(newCommand) }

func init() { Register(newBenchCommand) }

func newBenchCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure pdgate against baselines taken in the same run",
		Long: `Each benchmark runs pdgate next to a baseline in the same run and prints ratios, then
writes <out>/<name>.json, <out>/<name>.md and PNG plots (default out: bench-results/<name>).
--quick runs the short variant that make bench uses. Results and the exact commands are in
docs/benchmarks.md. The benchmarks that build stock GIE's EPP at run time (epp, memory) need a
Go toolchain and a checkout; they are in the developer tool pdgate-bench.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(benchSubcommands.build()...)
	return c
}
