package cli

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestBenchCommandListsRegisteredBenchmarks(t *testing.T) {
	RegisterBench(func() *cobra.Command {
		return &cobra.Command{Use: "zz-test-bench", Run: func(*cobra.Command, []string) {}}
	})
	out, err := run(t, "bench", "--help")
	if err != nil || !strings.Contains(out, "zz-test-bench") {
		t.Fatalf("pdgate bench --help: %v\n%s", err, out)
	}
}
