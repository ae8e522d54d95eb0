package grpcserver

import (
	"bytes"
	"testing"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

func TestDirtyPoolTiers(t *testing.T) {
	p := &dirtyPool{}
	cases := []struct{ n, wantCap int }{
		{1, 256}, {256, 256}, {257, 512}, {16 << 10, 16 << 10}, {62000, 64 << 10}, {(4 << 20) + 1, (4 << 20) + 1},
	}
	for _, tc := range cases {
		b := p.Get(tc.n)
		if len(*b) != tc.n || cap(*b) != tc.wantCap {
			t.Errorf("Get(%d): len %d cap %d, want cap %d", tc.n, len(*b), cap(*b), tc.wantCap)
		}
		p.Put(b)
	}
}

// TestCodecRoundTripsOverDirtyBuffers: messages marshalled into buffers a larger message
// left dirty decode to what was sent.
func TestCodecRoundTripsOverDirtyBuffers(t *testing.T) {
	c := protoCodec{pool: &dirtyPool{}}
	body := func(n int, fill byte) *extProcPb.ProcessingResponse {
		return &extProcPb.ProcessingResponse{Response: &extProcPb.ProcessingResponse_RequestBody{RequestBody: &extProcPb.BodyResponse{
			Response: &extProcPb.CommonResponse{BodyMutation: &extProcPb.BodyMutation{Mutation: &extProcPb.BodyMutation_StreamedResponse{
				StreamedResponse: &extProcPb.StreamedBodyResponse{Body: bytes.Repeat([]byte{fill}, n), EndOfStream: fill == 'z'}}}}}}}
	}
	for _, m := range []*extProcPb.ProcessingResponse{body(62000, 'a'), body(40000, 'b'), body(100, 'c'), body(61999, 'z'), {}} {
		data, err := c.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		wire := data.Materialize()
		data.Free()
		var got extProcPb.ProcessingResponse
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire)}, &got); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, m) {
			t.Fatalf("round trip of a %d-byte message differs", proto.Size(m))
		}
	}
}
