package epp

import (
	"io"
	"os"
	"testing"

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
	o, err := runner.ParseArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	return o
}
