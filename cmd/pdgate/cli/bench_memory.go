package cli

import "github.com/pdgate/pdgate/cmd/pdgate/bench/memory"

func init() { RegisterBench(memory.NewCommand) }
