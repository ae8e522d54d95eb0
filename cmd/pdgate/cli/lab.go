package cli

import "github.com/pdgate/pdgate/cmd/pdgate/lab"

// `pdgate lab`: the whole disaggregated data path on this machine (cmd/pdgate/lab).
func init() { Register(lab.NewCommand) }
