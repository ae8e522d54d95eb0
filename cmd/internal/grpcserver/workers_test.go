package grpcserver

import (
	"context"
	"io"
	"net"
	"runtime/metrics"
	"testing"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// echo answers every ext_proc message with an empty response until the stream ends.
type echo struct {
	extProcPb.UnimplementedExternalProcessorServer
}

func (echo) Process(s extProcPb.ExternalProcessor_ProcessServer) error {
	for {
		if _, err := s.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if err := s.Send(&extProcPb.ProcessingResponse{}); err != nil {
			return err
		}
	}
}

// goroutinesCreated counts the goroutines that run streams, one after another, to a server
// built with opts: what a stream costs in goroutines, the client's included.
func goroutinesCreated(t *testing.T, streams int, opts ...grpc.ServerOption) uint64 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	extProcPb.RegisterExternalProcessorServer(s, echo{})
	go func() { _ = s.Serve(l) }()
	defer s.Stop()
	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := extProcPb.NewExternalProcessorClient(conn)
	stream := func() {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		st, err := client.Process(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&extProcPb.ProcessingRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != nil {
			t.Fatal(err)
		}
		if err := st.CloseSend(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recv(); err != io.EOF {
			t.Fatalf("end of stream: %v", err)
		}
	}
	stream() // the connection and the workers start before counting
	sample := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(sample)
	before := sample[0].Value.Uint64()
	for range streams {
		stream()
	}
	metrics.Read(sample)
	return sample[0].Value.Uint64() - before
}

// The ext_proc servers' streams run on long-lived workers, not a goroutine each: a fresh
// goroutine starts on a small stack and copies it as it grows to the request path's depth.
func TestStreamsRunOnWorkers(t *testing.T) {
	const streams = 200
	withWorkers := goroutinesCreated(t, streams, ExtProcOptions()...)
	perStream := goroutinesCreated(t, streams, bufferOptions()...) // gRPC's default
	t.Logf("%d sequential streams created %d goroutines on workers, %d with a goroutine per stream", streams, withWorkers, perStream)
	if withWorkers+streams*9/10 > perStream {
		t.Fatalf("streams on workers created %d goroutines, one goroutine per stream %d: want at least %d fewer", withWorkers, perStream, streams*9/10)
	}
}
