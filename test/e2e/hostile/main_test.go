// Package hostile sends hostile input at the real binaries: spoofed routing headers at the
// gateway, SSRF attempts through every header the sidecar reads, oversized bodies, control
// characters in header values, and unknown JSON fields that must pass through untouched.
package hostile

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

var binDir, repoRoot string

func TestMain(m *testing.M) {
	testsupport.Main(m, "hostile-e2e", &binDir, &repoRoot, "sim", "sidecar", "epp", "gateway")
}

// start runs a binary until the test ends and waits for its health URL.
func start(t *testing.T, name, health string, args ...string) {
	t.Helper()
	testsupport.Run(t, binDir, name, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		if code, _, err := testsupport.Get(ctx, health); err == nil && code == http.StatusOK {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s did not become healthy at %s", name, health)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// newTrap is a listener an attacker would like pdgate to call: it counts every connection
// (and answers nothing useful).
func newTrap(t *testing.T, addr string) *testsupport.Dropper {
	t.Helper()
	return testsupport.NewDropper(t, addr)
}
