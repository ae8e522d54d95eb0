// Package extprocclient is pdgate's one ext_proc client: the Envoy side of the
// envoy.service.ext_proc.v3 protocol as GIE's EPP expects it (request headers with
// pseudo-headers, the body in FULL_DUPLEX_STREAMED frames, the served endpoint reported in the
// response headers' metadata_context). The dev gateway, `pdgate-bench epp` and the in-process
// test EPP all speak to an EPP through it, so the three agree on what Envoy does.
//
// A Client opens one Stream per HTTP request. The request phase is SendRequestHeaders and
// SendRequestBody (or SendRequest for a body already in memory) followed by AwaitRouting, which
// returns a Routing: the EPP's ImmediateResponse, or its header mutations, merged dynamic
// metadata and the body to forward. The response phase is ResponseHeaders and then
// RelayResponseBody; Finish half-closes and waits for the EPP to end the stream, Close
// abandons it. Messages are go-control-plane's protocol types throughout.
//
// Every failure that comes from the EPP (stream errors, message timeouts, protocol
// violations) wraps ErrEPP, so a caller can apply a failure mode the way Envoy's
// failure_mode_allow does.
package extprocclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// ErrEPP marks every failure that comes from the endpoint picker.
var ErrEPP = errors.New("endpoint picker")

func eppErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrEPP, fmt.Sprintf(format, args...))
}

// DefaultChunkSize is the request body frame size when Options.ChunkSize is 0.
const DefaultChunkSize = 16 << 10

// Options configure a Client.
type Options struct {
	// MessageTimeout bounds every wait for the EPP's next message, as Envoy's message_timeout
	// does; 0 leaves the waits bounded only by the context.
	MessageTimeout time.Duration
	// ChunkSize is the frame size SendRequest splits a request body into;
	// 0 = DefaultChunkSize.
	ChunkSize int
	// Conns is the number of HTTP/2 connections Dial opens (Envoy's workers each hold one);
	// streams take them in turn. 0 = 1.
	Conns int
	// TLS, when set, makes Dial use TLS with this configuration; nil dials plaintext.
	TLS *tls.Config
	// DiscardRequestBody spares a caller that forwards nothing (a load generator) the copy of
	// the body the EPP returns: Routing.Body stays nil, BodyMutation still says what happened.
	DiscardRequestBody bool
	// MaxMessageBytes raises gRPC's 4 MiB message limit both ways (a whole-body reply to a
	// large prompt exceeds it); 0 = 64 MiB.
	MaxMessageBytes int
}

func (o Options) chunkSize() int {
	if o.ChunkSize > 0 {
		return o.ChunkSize
	}
	return DefaultChunkSize
}

// Client opens ext_proc streams over one or more gRPC clients.
type Client struct {
	opts    Options
	conns   []*grpc.ClientConn
	clients []extprocv3.ExternalProcessorClient
	next    atomic.Uint64
}

// New wraps existing ext_proc clients; streams take them in turn. Close does not close their
// connections: the caller owns them.
func New(opts Options, clients ...extprocv3.ExternalProcessorClient) *Client {
	return &Client{opts: opts, clients: clients}
}

// Dial opens opts.Conns connections to addr (host:port or any gRPC target).
func Dial(addr string, opts Options, extra ...grpc.DialOption) (*Client, error) {
	n := max(opts.Conns, 1)
	creds := insecure.NewCredentials()
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	limit := opts.MaxMessageBytes
	if limit <= 0 {
		limit = 64 << 20
	}
	dialOpts := append([]grpc.DialOption{grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(limit), grpc.MaxCallSendMsgSize(limit))}, extra...)
	c := &Client{opts: opts}
	for i := 0; i < n; i++ {
		conn, err := grpc.NewClient(addr, dialOpts...)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("ext_proc client %s: %w", addr, err)
		}
		c.conns = append(c.conns, conn)
		c.clients = append(c.clients, extprocv3.NewExternalProcessorClient(conn))
	}
	return c, nil
}

// Conns returns the connections Dial opened (nil for New), e.g. for a readiness probe.
func (c *Client) Conns() []*grpc.ClientConn { return c.conns }

// Close closes the connections Dial opened.
func (c *Client) Close() {
	for _, conn := range c.conns {
		_ = conn.Close()
	}
}

// Open starts the stream of one HTTP request. ctx bounds the whole stream; Close or Finish
// must be called to release it.
func (c *Client) Open(ctx context.Context) (*Stream, error) {
	if len(c.clients) == 0 {
		return nil, errors.New("ext_proc client: no gRPC client to open a stream on")
	}
	cl := c.clients[int(c.next.Add(1)-1)%len(c.clients)]
	sctx, cancel := context.WithCancel(ctx)
	stream, err := cl.Process(sctx)
	if err != nil {
		cancel()
		return nil, eppErr("open stream: %v", err)
	}
	s := &Stream{
		stream:  stream,
		cancel:  cancel,
		msgs:    make(chan *extprocv3.ProcessingResponse, 16),
		recvErr: make(chan error, 1),
		timeout: c.opts.MessageTimeout,
		chunk:   c.opts.chunkSize(),
		discard: c.opts.DiscardRequestBody,
	}
	go s.recvLoop(sctx)
	return s, nil
}
