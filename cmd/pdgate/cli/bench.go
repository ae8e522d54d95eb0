package cli

import (
	"sort"
	"sync"

	"github.com/spf13/cobra"
)

// benchMu is not mu: NewRootCommand holds mu while it builds the bench command.
var (
	benchMu          sync.Mutex
	benchSubcommands []func() *cobra.Command
)

// RegisterBench adds a `pdgate bench <name>` subcommand constructor. Each benchmark adds
// itself from its own file in this package (bench_<name>.go), so benchmarks land without
// touching each other.
func RegisterBench(newCommand func() *cobra.Command) {
	benchMu.Lock()
	defer benchMu.Unlock()
	benchSubcommands = append(benchSubcommands, newCommand)
}

func init() { Register(newBenchCommand) }

func newBenchCommand() *cobra.Command {
	c := &cobra.Command{
		Use:   "bench",
		Short: "Measure pdgate against baselines taken in the same run",
		Long: `Each benchmark runs pdgate next to a baseline in the same run and prints ratios, then
writes <out>/<name>.json, <out>/<name>.md and PNG plots (default out: bench-results/<name>).
--quick runs the short variant that make bench uses. Results and the exact commands are in
docs/benchmarks.md.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	benchMu.Lock()
	cmds := make([]*cobra.Command, 0, len(benchSubcommands))
	for _, n := range benchSubcommands {
		cmds = append(cmds, n())
	}
	benchMu.Unlock()
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name() < cmds[j].Name() })
	c.AddCommand(cmds...)
	return c
}
