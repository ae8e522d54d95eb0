package testsupport

import (
	"net"
	"sync"
	"testing"
)

var (
	portMu    sync.Mutex
	handedOut = map[int]bool{}
)

// FreePort returns a loopback TCP port nobody listens on, never the same one twice in this
// test process: a port released right after the kernel picked it can be picked again by the
// next call, and two servers of one suite handed the same port fail to start.
func FreePort(t testing.TB) int {
	t.Helper()
	return FreePortOn(t, "127.0.0.1")
}

// FreePortOn is FreePort for a port free on host ("0.0.0.0": free on every address, for
// servers a test reaches through several loopback addresses).
func FreePortOn(t testing.TB, host string) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		p := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if Claim(p) {
			return p
		}
	}
	t.Fatal("no fresh free port after 100 tries")
	return 0
}

// Claim records port as handed out and reports whether it was fresh; pickers with their own
// rules (a port free on several addresses) use it to stay clear of FreePort's ports.
func Claim(port int) bool {
	portMu.Lock()
	defer portMu.Unlock()
	fresh := !handedOut[port]
	handedOut[port] = true
	return fresh
}
