// Package extproctest serves an ext_proc server over real gRPC for the length of a test: the
// EPP's, the dev gateway's and the benches' tests all drive one this way. It also runs a fake
// EPP's receive loop (receive.go) and builds the replies the fakes send most (replies.go).
package extproctest

import (
	"context"
	"net"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
)

// InMemoryTarget is the target to dial with InMemory's option.
const InMemoryTarget = "passthrough:///fake"

// Listen serves srv on a loopback port and returns its address.
func Listen(t testing.TB, srv extprocv3.ExternalProcessorServer) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(t, srv, ln)
	return ln.Addr().String()
}

// Dial serves srv on a loopback port and returns a plaintext connection to it.
func Dial(t testing.TB, srv extprocv3.ExternalProcessorServer) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(Listen(t, srv), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// InMemory serves srv on an in-memory listener and returns the dial option that reaches it
// (dial InMemoryTarget).
func InMemory(t testing.TB, srv extprocv3.ExternalProcessorServer) grpc.DialOption {
	l := bufconn.Listen(1 << 20)
	serve(t, srv, l)
	return grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return l.DialContext(ctx) })
}

func serve(t testing.TB, srv extprocv3.ExternalProcessorServer, l net.Listener) {
	s := grpc.NewServer()
	extprocv3.RegisterExternalProcessorServer(s, srv)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
}
