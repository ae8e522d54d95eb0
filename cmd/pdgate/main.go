// Command pdgate is the pdgate user CLI: validate configs, run the local lab, benchmark.
package main

import (
	"os"

	"github.com/pdgate/pdgate/cmd/pdgate/cli"
)

func main() {
	if err := cli.NewRootCommand().Execute(); err != nil {
		os.Exit(1)
	}
}
