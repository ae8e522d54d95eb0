package llmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr/testr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pdgate/pdgate/cmd/epp/runner"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/inprocepp"
)

// startRealEPP runs the pdgate EPP (cmd/epp/runner) in standalone mode with an endpoints file.
func startRealEPP(t *testing.T, configPath string, pods []pod) *epp {
	t.Helper()
	port := startMetricsServers(t, pods)
	var b strings.Builder
	b.WriteString("endpoints:\n")
	for _, p := range pods {
		fmt.Fprintf(&b, "- name: %s\n  namespace: default\n  address: %s\n  port: %d\n", p.name, p.ip, port)
		if len(p.labels) > 0 {
			b.WriteString("  labels:\n")
			for k, v := range p.labels {
				fmt.Fprintf(&b, "    %s: %s\n", k, v)
			}
		}
	}
	endpointsFile := filepath.Join(t.TempDir(), "endpoints.yaml")
	if err := os.WriteFile(endpointsFile, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := runner.ParseArgs([]string{"--endpoints-file", endpointsFile, "--config-file", configPath,
		"--grpc-port=0", "--grpc-health-port=0", "--metrics-port=0", "--secure-serving=false", "--tracing=false"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := log.IntoContext(context.Background(), testr.NewWithOptions(t, testr.Options{Verbosity: 0}))
	conn := inprocepp.Dial(t, inprocepp.RunBinary(ctx, t, o).GRPC)
	return &epp{EPP: &inprocepp.EPP{Client: extProcPb.NewExternalProcessorClient(conn), Port: port}, port: port}
}

// The same llm-d configs through the pdgate EPP binary's own assembly (standalone mode).
func TestRealEPPStandalone(t *testing.T) {
	t.Run("P/D with spoofed headers", func(t *testing.T) {
		e := startRealEPP(t, "../../../config/llmd/pd.yaml", []pod{
			{name: "prefill-0", ip: "127.0.0.101", labels: map[string]string{role: "prefill"}},
			{name: "decode-0", ip: "127.0.0.102", labels: map[string]string{role: "decode"}},
			{name: "decode-1", ip: "127.0.0.103", labels: map[string]string{role: "decode"}},
		})
		spoof := map[string]string{protocol.HeaderPrefillerHostPort: "10.66.66.66:1", protocol.HeaderEncoderHostsPorts: "10.66.66.66:2"}
		a := until(t, "EPP serves", func() answer { return e.send(t, "/v1/completions", spoof, completionBody(longPrompt("real-epp"))) },
			func(a answer) bool { return a.immediate == 0 })
		if a.set[protocol.HeaderPrefillerHostPort] != hostPort("127.0.0.101", e.port) || !a.removed[protocol.HeaderEncoderHostsPorts] {
			t.Fatalf("1P2D through the real EPP: %s", a)
		}
		// The profile handler's conditional-decode gate, through the EPP's scheduler wrappers
		// and status-marker rewrite.
		c := e.send(t, "/v1/completions", map[string]string{"prefer": "if-available"}, completionBody(longPrompt("real-epp-412")))
		if c.immediate != 412 || c.body != protocol.ConditionalDecodeBody {
			t.Fatalf("412 from the handler through the real EPP: %s", c)
		}
		if a.destination != hostPort("127.0.0.102", e.port) && a.destination != hostPort("127.0.0.103", e.port) {
			t.Fatalf("destination must be a decode pod: %s", a)
		}
	})
	t.Run("E/P/D", func(t *testing.T) {
		e := startRealEPP(t, "../../../config/llmd/e-p-d.yaml", []pod{
			{name: "encode-0", ip: "127.0.0.104", labels: map[string]string{role: "encode"}},
			{name: "prefill-0", ip: "127.0.0.105", labels: map[string]string{role: "prefill"}},
			{name: "decode-0", ip: "127.0.0.106", labels: map[string]string{role: "decode"}},
		})
		a := until(t, "EPP serves", func() answer {
			return e.send(t, "/v1/chat/completions", nil, chatBody(t, imageContent("https://img.example/real.png")))
		}, func(a answer) bool { return a.immediate == 0 })
		if a.set[protocol.HeaderEncoderHostsPorts] != hostPort("127.0.0.104", e.port) || a.set[protocol.HeaderPrefillerHostPort] != hostPort("127.0.0.105", e.port) {
			t.Fatalf("E/P/D through the real EPP: %s", a)
		}
	})
	t.Run("conditional decode 412", func(t *testing.T) {
		e := startRealEPP(t, "../../../config/llmd/conditional-decode.yaml", []pod{
			{name: "decode-0", ip: "127.0.0.107", labels: map[string]string{role: "decode"}},
		})
		a := until(t, "EPP answers", func() answer {
			return e.send(t, "/v1/completions", map[string]string{"prefer": "if-available"}, completionBody(longPrompt("real-412")))
		}, func(a answer) bool { return a.immediate != 0 && a.immediate != 503 })
		if a.immediate != 412 || a.body != protocol.ConditionalDecodeBody {
			t.Fatalf("412 through the real EPP: %s", a)
		}
	})
}
