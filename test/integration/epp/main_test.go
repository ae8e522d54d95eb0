package epp

import (
	"io"
	"os"
	"testing"

	"github.com/spf13/pflag"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/pdgate/pdgate/cmd/epp/runner"
)

func TestMain(m *testing.M) {
	var w io.Writer = io.Discard
	if os.Getenv("PDGATE_TEST_LOG") != "" {
		w = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(w), zap.UseDevMode(true)))
	os.Exit(m.Run())
}

// parseOpts builds options from command-line arguments exactly as bin/epp does.
func parseOpts(t *testing.T, args ...string) *runner.Options {
	t.Helper()
	o := runner.NewOptions()
	fs := pflag.NewFlagSet("epp", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	return o
}
