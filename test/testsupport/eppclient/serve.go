package eppclient

import (
	"net"
	"testing"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Serve runs srv as an ext_proc server on a loopback gRPC listener for the rest of the test
// and returns a client connected to it: an in-process EPP, or a wrapper around one, that a
// test drives over real gRPC streams.
func Serve(t testing.TB, srv extProcPb.ExternalProcessorServer) extProcPb.ExternalProcessorClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	extProcPb.RegisterExternalProcessorServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return extProcPb.NewExternalProcessorClient(conn)
}
