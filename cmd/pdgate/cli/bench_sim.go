package cli

import simbench "github.com/pdgate/pdgate/cmd/pdgate/bench/sim"

func init() { RegisterBench(simbench.NewCommand) }
