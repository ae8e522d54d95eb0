package cli

import "github.com/pdgate/pdgate/cmd/pdgate/bench/routing"

func init() { RegisterBench(routing.NewCommand) }
