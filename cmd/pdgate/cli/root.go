// Package cli builds the pdgate command tree. Each subcommand lives in its own file and adds
// itself with Register from an init function, so new subcommands need no edit here.
package cli

import (
	"sort"
	"sync"

	"github.com/spf13/cobra"
)

var (
	mu          sync.Mutex
	subcommands []func() *cobra.Command
)

// Register adds a subcommand constructor to the root command. Call it from init().
func Register(newCommand func() *cobra.Command) {
	mu.Lock()
	defer mu.Unlock()
	subcommands = append(subcommands, newCommand)
}

// NewRootCommand returns the pdgate root command with every registered subcommand.
func NewRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "pdgate",
		Short: "pdgate: prefill/decode disaggregated LLM serving on the Gateway API Inference Extension",
		Long: `pdgate is a set of Endpoint Picker (EPP) plugins for GIE v1.5.0 plus the binaries around
them (epp, sidecar, sim, gateway) that make prefill/decode and encode/prefill/decode
disaggregated serving work end to end.`,
		SilenceUsage: true,
	}
	mu.Lock()
	cmds := make([]*cobra.Command, 0, len(subcommands))
	for _, c := range subcommands {
		cmds = append(cmds, c())
	}
	mu.Unlock()
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name() < cmds[j].Name() })
	root.AddCommand(cmds...)
	return root
}
