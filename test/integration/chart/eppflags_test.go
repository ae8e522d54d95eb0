package chart

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/epp/runner"
)

// TestEPPAcceptsRenderedArgs parses the EPP container's args with the EPP's own flag set and
// validation (GIE's options plus pdgate's): every flag the chart passes exists, none is one of
// the deprecated metric flags GIE v1.5.0 refuses, and the parsed options point at the pool.
func TestEPPAcceptsRenderedArgs(t *testing.T) {
	for _, f := range sampleFiles(t) {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			vals := values(t, []string{f})
			dep := find(t, mustRender(t, name, testNS, vals), "Deployment", name+"-epp")
			args := stringList(container(t, dep, "containers", "epp")["args"])
			opts, err := runner.ParseArgs(args)
			if err != nil {
				t.Fatalf("epp rejects the chart's args %q: %v", args, err)
			}
			if opts.Standalone() || opts.PoolName != name || opts.PoolNamespace != testNS || opts.PoolGroup != "inference.networking.k8s.io" {
				t.Errorf("epp would watch pool %s/%s (group %s, standalone %v), want %s/%s", opts.PoolNamespace, opts.PoolName, opts.PoolGroup, opts.Standalone(), testNS, name)
			}
			if !opts.SecureServing || opts.MaxRequestBodyBytes <= 0 || opts.ConfigFile == "" {
				t.Errorf("epp options: secure %v, max body %d, config %q", opts.SecureServing, opts.MaxRequestBodyBytes, opts.ConfigFile)
			}
			if want := toInt(field(t, dep, "spec", "replicas")) > 1 && haMode(vals) == "leader-election"; opts.EnableLeaderElection != want {
				t.Errorf("leader election %v, want %v", opts.EnableLeaderElection, want)
			}
		})
	}
}
