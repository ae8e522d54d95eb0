// Command pdgate-bench is developer tooling: the benchmarks that need a Go toolchain and the
// repository at run time (`epp` builds stock GIE v1.5.0's EPP from the module cache, `memory`
// builds and profiles both EPPs and the sidecar). They live outside the user's `pdgate` binary,
// which keeps the benchmarks a user can run anywhere (`pdgate bench routing`, `pdgate bench sim`)
// and none of the harness, envtest control plane or GIE build code that only a checkout can use.
package main

import (
	"github.com/pdgate/pdgate/cmd/pdgate-bench/floor"
	"os"

	"github.com/spf13/cobra"

	"github.com/pdgate/pdgate/cmd/pdgate-bench/epp"
	"github.com/pdgate/pdgate/cmd/pdgate-bench/memory"
)

func main() {
	if err := newRootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "pdgate-bench",
		Short: "Developer benchmarks of pdgate's EPP and sidecar (need a Go toolchain and a checkout)",
		Long: `pdgate-bench runs the benchmarks that build their baselines at run time and so need a Go
toolchain, the module cache and a checkout of this repository (envtest binaries in bin/envtest):
pdgate's EPP next to stock GIE v1.5.0's in the same run (epp), and the resident memory of both
EPPs and of the sidecar (memory). Each writes <out>/<name>.json, <out>/<name>.md and PNG plots
(default out: bench-results/<name>); --quick runs the short variant that make bench uses. The
user benchmarks stay in pdgate (pdgate bench routing, pdgate bench sim). Results and the exact
commands are in docs/benchmarks.md.`,
		SilenceUsage: true,
	}
	root.AddCommand(epp.NewCommand(), memory.NewCommand(), floor.NewCommand())
	return root
}
