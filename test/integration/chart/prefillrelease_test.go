package chart

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/epp/prefillrelease"
	"github.com/pdgate/pdgate/cmd/epp/runner"
)

// The EPP gets --prefill-release-address=$(POD_IP):<metricsPort> by default (POD_IP from the
// downward API, so Kubernetes expands it), which the EPP's own flag set accepts once expanded;
// prefillRelease=false leaves it out; a user's flags cannot set it behind the chart's back.
func TestEPPPrefillReleaseAddress(t *testing.T) {
	const sel = "inferencePool.modelServers.matchLabels.app=x"
	for _, tt := range []struct {
		name string
		sets []string
		want string
	}{
		{"default", nil, "--prefill-release-address=$(POD_IP):9090"},
		{"metrics port follows", []string{"inferenceExtension.metricsPort=9191"}, "--prefill-release-address=$(POD_IP):9191"},
		{"off", []string{"inferenceExtension.prefillRelease=false"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dep := find(t, mustRender(t, "pr", testNS, values(t, nil, append([]string{sel}, tt.sets...)...)), "Deployment", "pr-epp")
			c := container(t, dep, "containers", "epp")
			args := stringList(c["args"])
			var got string
			for _, a := range args {
				if strings.HasPrefix(a, "--prefill-release-address") {
					got = a
				}
			}
			if got != tt.want {
				t.Fatalf("arg %q, want %q (args %v)", got, tt.want, args)
			}
			if tt.want == "" {
				return
			}
			var env []string
			for _, e := range c["env"].([]any) {
				m := e.(map[string]any)
				if vf, ok := m["valueFrom"].(map[string]any); ok {
					if fr, ok := vf["fieldRef"].(map[string]any); ok {
						env = append(env, toString(m["name"])+"="+toString(fr["fieldPath"]))
					}
				}
			}
			if !slices.Contains(env, "POD_IP=status.podIP") {
				t.Fatalf("env %v lacks POD_IP from status.podIP", env)
			}
			// As Kubernetes expands it, for an IPv4 and an IPv6 pod.
			for _, ip := range []string{"10.1.2.3", "fd00::7"} {
				expanded := make([]string, len(args))
				for i, a := range args {
					expanded[i] = os.Expand(strings.ReplaceAll(a, "$(POD_IP)", "${POD_IP}"), func(string) string { return ip })
				}
				opts, err := runner.ParseArgs(expanded)
				if err != nil {
					t.Fatalf("%s: %v", ip, err)
				}
				if _, err := prefillrelease.New(opts.PrefillReleaseAddress); err != nil {
					t.Fatalf("%s: %v", ip, err)
				}
			}
		})
	}
	if _, err := render(t, "pr", testNS, values(t, nil, sel, "inferenceExtension.flags.prefill-release-address=1.2.3.4:1")); err == nil ||
		!strings.Contains(err.Error(), "the chart sets this flag") {
		t.Fatalf("a user flag must be refused: %v", err)
	}
}
