package cli

import "github.com/pdgate/pdgate/cmd/pdgate/bench/epp"

func init() { RegisterBench(epp.NewCommand) }
