package testsupport

import (
	"net"
	"sync/atomic"
	"testing"
)

// Dropper is a TCP listener that accepts every connection and closes it at once. A test holds
// its port, so no other server takes it over (a closed server's port can be reused), and any
// client that reaches it meets a transport error: a dead EPP, a trap an attacker would like a
// proxy to call, something other than a ZeroMQ subscriber on a subscriber's port.
type Dropper struct {
	ln   net.Listener
	hits atomic.Int64
}

// NewDropper listens on addr ("127.0.0.1:0" for any port) until Close or the test's end.
func NewDropper(t testing.TB, addr string) *Dropper {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	d := &Dropper{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d.hits.Add(1)
			_ = c.Close()
		}
	}()
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// Addr is the listener's host:port.
func (d *Dropper) Addr() string { return d.ln.Addr().String() }

// Port is the listener's port.
func (d *Dropper) Port() int { return d.ln.Addr().(*net.TCPAddr).Port }

// Hits is the number of connections accepted so far.
func (d *Dropper) Hits() int64 { return d.hits.Load() }

// Close stops listening; the port is free again.
func (d *Dropper) Close() error { return d.ln.Close() }
