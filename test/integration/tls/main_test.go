// Package tls tests transport security on the real binaries: the EPP's ext_proc port serves
// TLS by default and reloads a rotated certificate; the sidecar's listener serves TLS from
// files, picks up rotated files, and its legs speak TLS to prefill engines.
package tls

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

var binDir, repoRoot string

func TestMain(m *testing.M) {
	testsupport.Main(m, "tls-integration", &binDir, &repoRoot, "sim", "sidecar", "epp")
}

// run starts a binary until the test ends.
func run(t *testing.T, name string, args ...string) { testsupport.Run(t, binDir, name, args...) }

// peerCert completes one TLS handshake (no verification: the test compares the served
// certificate itself) and returns the leaf, retrying until ctx ends.
func peerCert(ctx context.Context, t *testing.T, addr string, alpn ...string) []byte {
	t.Helper()
	for {
		d := &tls.Dialer{Config: &tls.Config{InsecureSkipVerify: true, NextProtos: alpn}}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			st := c.(*tls.Conn).ConnectionState()
			_ = c.Close()
			return st.PeerCertificates[0].Raw
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no TLS handshake with %s: %v", addr, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
