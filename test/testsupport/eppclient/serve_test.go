package eppclient

import (
	"context"
	"testing"
	"time"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The client Serve returns reaches the server it runs: a server that implements nothing
// answers the stream with Unimplemented, not a connection error.
func TestServe(t *testing.T) {
	c := Serve(t, extProcPb.UnimplementedExternalProcessorServer{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := c.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); status.Code(err) != codes.Unimplemented {
		t.Fatalf("Recv: %v, want Unimplemented from the served server", err)
	}
}
