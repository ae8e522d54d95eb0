package eppclient

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
)

// The banner lines in which bin/epp names its listeners once it serves (cmd/epp/main.go).
const (
	bannerGRPC    = "ext_proc gRPC : "
	bannerMetrics = "metrics       : "
)

// Listeners returns the ext_proc address and the metrics URL bin/epp printed in output (its
// output so far); each is "" until its line is printed. Suites start bin/epp with port 0, so
// the banner is the only place the ports are known.
func Listeners(output string) (grpcAddr, metricsURL string) {
	for _, line := range strings.Split(output, "\n") {
		if _, rest, ok := strings.Cut(line, bannerGRPC); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				grpcAddr = f[0]
			}
		}
		if _, rest, ok := strings.Cut(line, bannerMetrics); ok {
			metricsURL = strings.TrimSpace(rest)
		}
	}
	return grpcAddr, metricsURL
}

// DialStarted waits until a plaintext bin/epp has printed both listeners in output (which returns
// its output so far), dials its ext_proc port on loopback (the client closes when the test
// ends) and returns the client and the metrics URL. It fails t, showing the output, when exited
// closes first or timeout passes.
func DialStarted(t testing.TB, output func() string, exited <-chan struct{}, timeout time.Duration) (*extprocclient.Client, string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		grpcAddr, metricsURL := Listeners(output())
		if grpcAddr != "" && metricsURL != "" {
			_, port, err := net.SplitHostPort(grpcAddr)
			if err != nil {
				t.Fatalf("EPP printed a bad ext_proc address %q", grpcAddr)
			}
			c, err := extprocclient.Dial("127.0.0.1:"+port, extprocclient.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			return c, metricsURL
		}
		if time.Now().After(deadline) {
			t.Fatalf("EPP did not print its listeners within %v:\n%s", timeout, output())
		}
		select {
		case <-exited:
			t.Fatalf("EPP exited before printing its listeners:\n%s", output())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
