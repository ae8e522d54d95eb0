package inprocepp

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pdgate/pdgate/cmd/epp/runner"
)

// RunBinary runs bin/epp's own assembly, cmd/epp/runner with options parsed as bin/epp parses
// them, in process until the test ends, and returns the addresses it listens on. ctx carries
// the EPP's logger. At the test's end the EPP must stop within 20 s and without an error; it
// must start listening within 60 s.
func RunBinary(ctx context.Context, t *testing.T, o *runner.Options) runner.Addresses {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	addrs := make(chan runner.Addresses, 1)
	o.OnListening = func(a runner.Addresses) { addrs <- a }
	done := make(chan error, 1)
	go func() { done <- runner.Run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("EPP stopped with: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("EPP did not stop within 20s")
		}
	})
	select {
	case a := <-addrs:
		return a
	case err := <-done:
		t.Fatalf("EPP failed to start: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("EPP did not start listening within 60s")
	}
	return runner.Addresses{}
}

// Dial opens a plaintext gRPC connection, closed when the test ends, to the port of addr (a
// listener address such as "[::]:9002") on 127.0.0.1.
func Dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listener address %q: %v", addr, err)
	}
	conn, err := grpc.NewClient("127.0.0.1:"+port, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}
