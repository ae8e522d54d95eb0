// Package cli builds the pdgate command tree. Each subcommand lives in its own file and adds
// itself with Register (or RegisterBench) from an init function, so new subcommands need no
// edit here.
package cli

import (
	"sort"
	"sync"

	"github.com/spf13/cobra"
)

// commandSet collects subcommand constructors registered from init functions and builds
// them, sorted by name, each time a command tree is made (tests build several).
type commandSet struct {
	mu    sync.Mutex
	ctors []func() *cobra.Command
}

func (s *commandSet) add(newCommand func() *cobra.Command) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ctors = append(s.ctors, newCommand)
}

// build calls the constructors outside the lock: a constructor may build its own set (the
// bench command does).
func (s *commandSet) build() []*cobra.Command {
	s.mu.Lock()
	ctors := append([]func() *cobra.Command(nil), s.ctors...)
	s.mu.Unlock()
	cmds := make([]*cobra.Command, 0, len(ctors))
	for _, c := range ctors {
		cmds = append(cmds, c())
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].Name() < cmds[j].Name() })
	return cmds
}

var subcommands commandSet

// Register adds a subcommand constructor to the root command. Call it from init().
func Register(newCommand func() *cobra.Command) { subcommands.add(newCommand) }

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
	root.AddCommand(subcommands.build()...)
	return root
}
