package epp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pdgate/pdgate/plugins/protocol"
)

// Names Envoy and GIE use for the routing decision.
const (
	destinationHeader = "x-gateway-destination-endpoint"
	lbNamespace       = "envoy.lb"
	servedKey         = "x-gateway-destination-endpoint-served"
)

// Exchange is one HTTP request and its upstream answer as Envoy presents them to ext_proc.
type Exchange struct {
	// Headers are the request headers, pseudo-headers (:method, :path, ...) included.
	Headers map[string]string
	Body    []byte
	// ChunkSize splits Body into FULL_DUPLEX_STREAMED frames; 0 = 16 KiB.
	ChunkSize int
	// RespHeaders and RespBody play the model server's answer (:status included).
	RespHeaders map[string]string
	RespBody    []byte
}

// Outcome is what one exchange produced.
type Outcome struct {
	// Destination is the picked endpoint (envoy.lb metadata, else the header mutation).
	Destination string
	// Prefill is the x-prefiller-host-port the EPP set ("" if none).
	Prefill string
	// Immediate is the status of an ImmediateResponse (0: the request was routed).
	Immediate int
	// Routing is the time from the last request body frame sent to the request headers reply
	// (the routing decision) received: the latency the EPP adds before Envoy can connect.
	Routing time.Duration
	// RequestPhase runs from the last body frame sent to the last request body reply.
	RequestPhase time.Duration
	// Err is a protocol or transport failure.
	Err error
}

// OK reports a routed exchange without errors.
func (o Outcome) OK() bool { return o.Err == nil && o.Immediate == 0 && o.Destination != "" }

// Client is an ext_proc client over a few HTTP/2 connections, as Envoy's workers hold them.
type Client struct {
	conns   []*grpc.ClientConn
	clients []extprocv3.ExternalProcessorClient
	next    atomic.Uint64
	// MessageTimeout bounds every wait for one EPP message (Envoy's message_timeout); 0 = 30 s.
	MessageTimeout time.Duration
}

// Dial opens n connections to addr (plaintext, or TLS without verification).
func Dial(addr string, n int, useTLS bool) (*Client, error) {
	if n < 1 {
		return nil, fmt.Errorf("ext_proc client: %d connections, want >= 1", n)
	}
	creds := insecure.NewCredentials()
	if useTLS {
		creds = credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, NextProtos: []string{"h2"}}) //nolint:gosec // self-signed EPP on loopback
	}
	c := &Client{}
	for i := 0; i < n; i++ {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("ext_proc client %s: %w", addr, err)
		}
		c.conns = append(c.conns, conn)
		c.clients = append(c.clients, extprocv3.NewExternalProcessorClient(conn))
	}
	return c, nil
}

// NewClient wraps existing ext_proc clients (tests).
func NewClient(clients ...extprocv3.ExternalProcessorClient) *Client {
	return &Client{clients: clients}
}

// Close closes the connections.
func (c *Client) Close() {
	for _, conn := range c.conns {
		_ = conn.Close()
	}
}

// Do runs one exchange to the end. hold, when non-nil, is waited on after the request phase
// and before the response phase: the request stays in flight (a burst) until it is closed.
// routed, when non-nil, receives the outcome as soon as the request phase ends.
func (c *Client) Do(ctx context.Context, x *Exchange, hold <-chan struct{}, routed func(Outcome)) Outcome {
	cl := c.clients[int(c.next.Add(1)-1)%len(c.clients)]
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := cl.Process(sctx)
	if err != nil {
		o := Outcome{Err: fmt.Errorf("open stream: %w", err)}
		if routed != nil {
			routed(o)
		}
		return o
	}
	s := &session{stream: stream, timeout: c.MessageTimeout, cancel: cancel}
	if s.timeout == 0 {
		s.timeout = 30 * time.Second
	}
	o := s.requestPhase(x)
	if routed != nil {
		routed(o)
	}
	if !o.OK() {
		_ = stream.CloseSend()
		return o
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			o.Err = ctx.Err()
			return o
		}
	}
	if err := s.responsePhase(x, o.Destination); err != nil {
		o.Err = err
		return o
	}
	// Half-close and wait for the server to end the stream: its end-of-request work is done.
	_ = stream.CloseSend()
	if _, err := s.recv(); !errors.Is(err, io.EOF) {
		o.Err = fmt.Errorf("after the response: want the stream to end, got %v", err)
	}
	return o
}

// session is one ext_proc stream. Messages are read in protocol order; a per-message timer
// cancels the stream if the EPP stays silent.
type session struct {
	stream  extprocv3.ExternalProcessor_ProcessClient
	timeout time.Duration
	cancel  context.CancelFunc
}

func (s *session) recv() (*extprocv3.ProcessingResponse, error) {
	t := time.AfterFunc(s.timeout, s.cancel)
	defer t.Stop()
	m, err := s.stream.Recv()
	if err != nil && !t.Stop() {
		return nil, fmt.Errorf("no message within %s: %w", s.timeout, err)
	}
	return m, err
}

func (s *session) send(r *extprocv3.ProcessingRequest) error {
	if err := s.stream.Send(r); err != nil {
		return fmt.Errorf("send %T: %w", r.GetRequest(), err)
	}
	return nil
}

func headerMap(h map[string]string) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{}
	for k, v := range h {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return hm
}

// requestPhase sends the request headers and the body in frames (end_of_stream on the last),
// then reads the headers reply and the streamed body replies, as Envoy does.
func (s *session) requestPhase(x *Exchange) Outcome {
	var o Outcome
	if err := s.send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(x.Headers), EndOfStream: len(x.Body) == 0}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{
			RequestBodyMode:  extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		},
	}); err != nil {
		o.Err = err
		return o
	}
	chunk := x.ChunkSize
	if chunk <= 0 {
		chunk = 16 << 10
	}
	for off := 0; off < len(x.Body); off += chunk {
		end := min(off+chunk, len(x.Body))
		if err := s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
			RequestBody: &extprocv3.HttpBody{Body: x.Body[off:end], EndOfStream: end == len(x.Body)}}}); err != nil {
			// The EPP may have answered (413, 400) and closed: its reply wins, as in Envoy.
			o.Err = err
			break
		}
	}
	sent := time.Now()
	gotHeaders, bodyDone := false, len(x.Body) == 0
	for !gotHeaders || !bodyDone {
		m, err := s.recv()
		if err != nil {
			if o.Err == nil {
				o.Err = fmt.Errorf("request phase: %w", err)
			}
			return o
		}
		o.Err = nil
		readLB(m.GetDynamicMetadata(), &o)
		switch v := m.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			o.Immediate = int(v.ImmediateResponse.GetStatus().GetCode())
			if o.Immediate == 0 {
				o.Immediate = 200
			}
			o.Routing = time.Since(sent)
			o.RequestPhase = o.Routing
			return o
		case *extprocv3.ProcessingResponse_RequestHeaders:
			o.Routing = time.Since(sent)
			gotHeaders = true
			cr := v.RequestHeaders.GetResponse()
			readHeaders(cr.GetHeaderMutation(), &o)
			if cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE && cr.GetBodyMutation() != nil {
				bodyDone = true
			}
		case *extprocv3.ProcessingResponse_RequestBody:
			if !gotHeaders {
				o.Err = errors.New("request body reply before the request headers reply")
				return o
			}
			cr := v.RequestBody.GetResponse()
			readHeaders(cr.GetHeaderMutation(), &o)
			if sr := cr.GetBodyMutation().GetStreamedResponse(); sr != nil {
				bodyDone = sr.GetEndOfStream()
			} else {
				bodyDone = true
			}
		case *extprocv3.ProcessingResponse_RequestTrailers:
		default:
			o.Err = fmt.Errorf("unexpected reply %T in the request phase", m.GetResponse())
			return o
		}
	}
	o.RequestPhase = time.Since(sent)
	if o.Destination == "" {
		o.Err = errors.New("routed without a destination (no envoy.lb metadata, no " + destinationHeader + ")")
	}
	return o
}

// responsePhase plays the upstream's answer: response headers (with the served endpoint in
// the metadata context, as Envoy reports it), then the body in one frame with end_of_stream.
func (s *session) responsePhase(x *Exchange, served string) error {
	st, _ := structpb.NewStruct(map[string]any{servedKey: served})
	if err := s.send(&extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{
			Headers: headerMap(x.RespHeaders), EndOfStream: len(x.RespBody) == 0}},
		MetadataContext: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{lbNamespace: st}},
	}); err != nil {
		return err
	}
	if err := s.expect("response headers", func(m *extprocv3.ProcessingResponse) (bool, error) {
		if m.GetResponseHeaders() == nil {
			return false, fmt.Errorf("want the response headers reply, got %T", m.GetResponse())
		}
		return true, nil
	}); err != nil || len(x.RespBody) == 0 {
		return err
	}
	if err := s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
		ResponseBody: &extprocv3.HttpBody{Body: x.RespBody, EndOfStream: true}}}); err != nil {
		return err
	}
	return s.expect("response body", func(m *extprocv3.ProcessingResponse) (bool, error) {
		rb := m.GetResponseBody()
		if rb == nil {
			return false, fmt.Errorf("want a response body reply, got %T", m.GetResponse())
		}
		if sr := rb.GetResponse().GetBodyMutation().GetStreamedResponse(); sr != nil {
			return sr.GetEndOfStream(), nil
		}
		return true, nil
	})
}

// expect reads messages until done reports true.
func (s *session) expect(what string, done func(*extprocv3.ProcessingResponse) (bool, error)) error {
	for {
		m, err := s.recv()
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ir := m.GetImmediateResponse(); ir != nil {
			return fmt.Errorf("%s: immediate response %d", what, ir.GetStatus().GetCode())
		}
		ok, err := done(m)
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		if ok {
			return nil
		}
	}
}

func readHeaders(hm *extprocv3.HeaderMutation, o *Outcome) {
	for _, h := range hm.GetSetHeaders() {
		v := string(h.GetHeader().GetRawValue())
		if v == "" {
			v = h.GetHeader().GetValue()
		}
		switch strings.ToLower(h.GetHeader().GetKey()) {
		case destinationHeader:
			if o.Destination == "" {
				o.Destination = firstOf(v)
			}
		case protocol.HeaderPrefillerHostPort:
			o.Prefill = v
		}
	}
}

// readLB takes the destination from envoy.lb metadata, which Envoy's original-destination
// cluster prefers over the header.
func readLB(st *structpb.Struct, o *Outcome) {
	lb := st.GetFields()[lbNamespace].GetStructValue()
	if v := lb.GetFields()[destinationHeader].GetStringValue(); v != "" {
		o.Destination = firstOf(v)
	}
}

// firstOf returns the first of a comma-separated endpoint list (primary, then fallbacks).
func firstOf(v string) string {
	first, _, _ := strings.Cut(v, ",")
	return strings.TrimSpace(first)
}
