package epp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Exchange is one HTTP request and its upstream answer as Envoy presents them to ext_proc.
type Exchange struct {
	// Headers are the request headers, pseudo-headers (:method, :path, ...) included.
	Headers map[string]string
	Body    []byte
	// RespHeaders and RespBody play the model server's answer (:status included).
	RespHeaders map[string]string
	RespBody    []byte
	// RespEvents, when set, play a streamed answer instead of RespBody: one frame each.
	RespEvents [][]byte
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

// Client runs exchanges over pdgate's ext_proc client, the one the dev gateway uses.
type Client struct {
	*extprocclient.Client
}

// Dial opens conns plaintext connections to addr, as Envoy's workers each hold one; request
// bodies go out in frames of chunk bytes.
func Dial(addr string, conns, chunk int) (*Client, error) {
	return dial(addr, conns, chunk, 0)
}

// dial is Dial with the wait for one EPP message bounded by timeout instead (0: 30 s).
func dial(addr string, conns, chunk int, timeout time.Duration) (*Client, error) {
	if conns < 1 {
		return nil, fmt.Errorf("ext_proc client: %d connections, want >= 1", conns)
	}
	o := clientOptions(chunk)
	o.Conns = conns
	if timeout > 0 {
		o.MessageTimeout = timeout
	}
	c, err := extprocclient.Dial(addr, o)
	if err != nil {
		return nil, fmt.Errorf("bench client: %w", err)
	}
	return &Client{c}, nil
}

// clientOptions bound every wait for one EPP message by 30 s (Envoy's message_timeout); the
// body the EPP returns is not kept, as nothing is forwarded.
func clientOptions(chunk int) extprocclient.Options {
	return extprocclient.Options{ChunkSize: chunk, MessageTimeout: 30 * time.Second, DiscardRequestBody: true}
}

// Do runs one exchange to the end. hold, when non-nil, is waited on after the request phase
// and before the response phase: the request stays in flight (a burst) until it is closed.
// routed, when non-nil, receives the outcome as soon as the request phase ends.
func (c *Client) Do(ctx context.Context, x *Exchange, hold <-chan struct{}, routed func(Outcome)) Outcome {
	report := func(o Outcome) Outcome {
		if routed != nil {
			routed(o)
		}
		return o
	}
	s, err := c.Open(ctx)
	if err != nil {
		return report(Outcome{Err: err})
	}
	defer s.Close()
	o := requestPhase(ctx, s, x)
	report(o)
	if !o.OK() {
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
	if err := responsePhase(ctx, s, x, o.Destination); err != nil {
		o.Err = err
		return o
	}
	// Half-close and wait for the server to end the stream: its end-of-request work is done.
	if err := s.Finish(ctx); err != nil {
		o.Err = err
	}
	return o
}

// requestPhase sends the request headers and the body in frames, then reads the EPP's
// routing answer, as Envoy does.
func requestPhase(ctx context.Context, s *extprocclient.Stream, x *Exchange) Outcome {
	r, err := s.Route(ctx, extprocclient.HeaderMap(x.Headers), x.Body)
	if err != nil {
		return Outcome{Err: fmt.Errorf("request phase: %w", err)}
	}
	o := Outcome{Routing: r.Routed, RequestPhase: r.Done, Immediate: r.Status()}
	if o.Immediate != 0 {
		return o
	}
	o.Prefill, _ = r.Header(protocol.HeaderPrefillerHostPort)
	if d := r.Destinations(); len(d) > 0 {
		o.Destination = d[0]
	} else {
		o.Err = errors.New("routed without a destination (no envoy.lb metadata, no " + extprocclient.DestinationHeader + ")")
	}
	return o
}

// responsePhase plays the upstream's answer: response headers (with the served endpoint in
// the metadata context, as Envoy reports it), then the body.
func responsePhase(ctx context.Context, s *extprocclient.Stream, x *Exchange, served string) error {
	hr, err := s.ResponseHeaders(ctx, extprocclient.HeaderMap(x.RespHeaders), served, len(x.RespBody) == 0 && len(x.RespEvents) == 0)
	if err != nil {
		return fmt.Errorf("response headers: %w", err)
	}
	if hr.Immediate != nil {
		return fmt.Errorf("response headers: immediate response %d", extprocclient.ImmediateStatus(hr.Immediate))
	}
	var body io.Reader = &wholeBody{b: x.RespBody}
	switch {
	case len(x.RespEvents) > 0:
		body = &eventsBody{events: x.RespEvents}
	case len(x.RespBody) == 0:
		return nil
	}
	if err := s.RelayResponseBody(ctx, body, func([]byte) error { return nil }); err != nil {
		return fmt.Errorf("response body: %w", err)
	}
	return nil
}

// wholeBody returns io.EOF with its last bytes, so a body that fits one read goes to the EPP
// as one frame carrying end_of_stream (an upstream with a Content-Length ends that way), not as
// a frame and then an empty one: the EPP's work per request stays what earlier runs measured.
type wholeBody struct{ b []byte }

func (w *wholeBody) Read(p []byte) (int, error) {
	n := copy(p, w.b)
	w.b = w.b[n:]
	if len(w.b) == 0 {
		return n, io.EOF
	}
	return n, nil
}

// eventsBody returns one event per read, io.EOF with the last: each event goes to the EPP as
// one response body frame, the last carrying end_of_stream.
type eventsBody struct {
	events [][]byte
	off    int // into events[0]
}

func (e *eventsBody) Read(p []byte) (int, error) {
	if len(e.events) == 0 {
		return 0, io.EOF
	}
	n := copy(p, e.events[0][e.off:])
	if e.off += n; e.off == len(e.events[0]) {
		e.events, e.off = e.events[1:], 0
	}
	if len(e.events) == 0 {
		return n, io.EOF
	}
	return n, nil
}
