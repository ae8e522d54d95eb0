// Package grpcserver holds the gRPC server options of pdgate's ext_proc servers: the EPP's and
// the protocol floor's that pdgate-bench measures it against, so both pay the same for the
// same frames.
package grpcserver

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
)

// gRPC's default buffer pool clears every buffer it hands out, over the buffer's whole
// capacity, and its tiers jump from 32 KiB to 1 MiB: each 62,000-byte body chunk the EPP
// sends back cleared 1 MiB, and each 16 KiB frame it read 32 KiB, which made memclr the
// largest single cost of a 220 KB request over ext_proc. Nothing here needs zeroed memory:
// an HTTP/2 frame is read over the whole buffer and a proto marshal writes every byte it
// returns. So the ext_proc server reads and marshals through a pool that neither clears nor
// rounds a 62,000-byte chunk up to 1 MiB.

// dirtyPool is a mem.BufferPool in power-of-two tiers whose buffers come back as they were
// left.
type dirtyPool struct {
	tiers [maxPooledShift + 1]sync.Pool
}

const (
	minPooledShift = 8  // 256 B; smaller requests round up to it
	maxPooledShift = 22 // 4 MiB; larger buffers are allocated and dropped
)

var _ mem.BufferPool = (*dirtyPool)(nil)

func tierOf(n int) int {
	return max(minPooledShift, bits.Len(uint(n-1)))
}

func (p *dirtyPool) Get(n int) *[]byte {
	t := tierOf(n)
	if n <= 0 || t > maxPooledShift {
		b := make([]byte, n)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:n]
		return b
	}
	b := make([]byte, n, 1<<t)
	return &b
}

func (p *dirtyPool) Put(b *[]byte) {
	c := cap(*b)
	if c < 1<<minPooledShift || c > 1<<maxPooledShift || c&(c-1) != 0 {
		return
	}
	p.tiers[bits.Len(uint(c))-1].Put(b)
}

// protoCodec is gRPC's proto codec with marshalled messages in a dirtyPool.
type protoCodec struct{ pool mem.BufferPool }

var _ encoding.CodecV2 = protoCodec{}

// messageOf is v as a protobuf message (v2, or v1 adapted), as gRPC's own codec accepts it.
func messageOf(v any) (proto.Message, bool) {
	switch m := v.(type) {
	case proto.Message:
		return m, true
	case protoadapt.MessageV1:
		return protoadapt.MessageV2Of(m), true
	}
	return nil, false
}

func (c protoCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := messageOf(v)
	if !ok {
		return nil, fmt.Errorf("proto: cannot marshal %T", v)
	}
	size := proto.Size(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := proto.MarshalOptions{UseCachedSize: true}.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := c.pool.Get(size)
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

func (c protoCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := messageOf(v)
	if !ok {
		return fmt.Errorf("proto: cannot unmarshal into %T", v)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	// proto.Unmarshal copies bytes fields out of buf, so buf can go back to the pool.
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}

func (protoCodec) Name() string { return "proto" }

// ExtProcOptions are an ext_proc server's options: flow-control windows that hold a whole large
// prompt, and the buffer pool and codec below.
func ExtProcOptions() []grpc.ServerOption {
	return append([]grpc.ServerOption{
		// A 220 KB prompt is 14 body frames; HTTP/2's default 64 KiB stream window makes the
		// gateway wait for a WINDOW_UPDATE several times per request. Windows that hold a
		// whole large prompt let it stream in without stalls or extra frames.
		grpc.InitialWindowSize(1 << 20),
		grpc.InitialConnWindowSize(8 << 20),
		grpc.NumStreamWorkers(StreamWorkers),
	}, bufferOptions()...)
}

// StreamWorkers is how many long-lived goroutines serve ext_proc streams. gRPC otherwise starts
// a goroutine per stream, and Envoy opens a stream per HTTP request: each began on a fresh
// 8 KiB stack and grew it, copying it each time, to the depth of the scheduling path, about
// four copies a request and 8.8 % of the EPP's instructions at 1 KB under llm-d's P/D config
// (callgrind). A worker keeps its grown stack from one stream to the next until a garbage
// collection shrinks it. A stream that finds every worker busy (each holds its stream for the
// whole HTTP request, response included) gets its own goroutine, as without workers; an idle
// worker costs its stack.
const StreamWorkers = 64

// bufferOptions are the ext_proc server's pool and codec.
func bufferOptions() []grpc.ServerOption {
	pool := &dirtyPool{}
	return []grpc.ServerOption{experimental.BufferPool(pool), grpc.ForceServerCodecV2(protoCodec{pool: pool})}
}
