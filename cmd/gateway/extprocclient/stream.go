package extprocclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// Stream is the ext_proc stream of one HTTP request. A goroutine drains Recv into a channel so
// that every wait for the EPP's next message can be bounded by the message timeout, as Envoy's
// message_timeout bounds it, and by the caller's context.
//
// The request-phase methods are called in protocol order from one goroutine;
// RelayResponseBody runs its own sender while it reads.
type Stream struct {
	stream  extprocv3.ExternalProcessor_ProcessClient
	cancel  context.CancelFunc
	msgs    chan *extprocv3.ProcessingResponse
	recvErr chan error
	timeout time.Duration
	chunk   int
	discard bool // Options.DiscardRequestBody

	headersSent bool      // the first message (which carries the protocol configuration) went out
	expectBody  bool      // the request headers did not end the stream: body replies follow
	sent        [][]byte  // the request body frames, by reference, for a reply that keeps the body
	ended       time.Time // when the request's last frame went out (or failed to)
	closeOnce   sync.Once
	// sendMu serialises Send and CloseSend, which gRPC forbids concurrently: RelayResponseBody's
	// sender may still be sending when the caller gives up and closes the stream.
	sendMu sync.Mutex
}

func (s *Stream) recvLoop(ctx context.Context) {
	defer close(s.msgs)
	for {
		m, err := s.stream.Recv()
		if err != nil {
			s.recvErr <- err
			return
		}
		select {
		case s.msgs <- m:
		case <-ctx.Done():
			s.recvErr <- ctx.Err()
			return
		}
	}
}

func (s *Stream) send(req *extprocv3.ProcessingRequest) error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	if err := s.stream.Send(req); err != nil {
		if errors.Is(err, io.EOF) {
			// The server closed the stream; the reason is on the Recv side.
			return eppErr("stream closed by the endpoint picker")
		}
		return eppErr("send %T: %v", req.GetRequest(), err)
	}
	return nil
}

// armedNow is a closed channel: the message timeout runs from the start of the wait.
var armedNow = func() <-chan struct{} { c := make(chan struct{}); close(c); return c }()

// recv waits for the EPP's next message; io.EOF (unwrapped) means the EPP ended the stream.
// The message timeout starts once armed is closed: while an upstream is still producing a
// streamed response its pace is governed by the upstream's timeouts, not by the EPP's; ctx
// ends the wait in every case.
func (s *Stream) recv(ctx context.Context, armed <-chan struct{}) (*extprocv3.ProcessingResponse, error) {
	var timer <-chan time.Time
	for {
		select {
		case m, ok := <-s.msgs:
			if ok {
				return m, nil
			}
			err := <-s.recvErr
			s.recvErr <- err // keep it for later callers
			if errors.Is(err, io.EOF) {
				return nil, io.EOF
			}
			return nil, eppErr("receive: %v", err)
		case <-armed:
			armed = nil
			if s.timeout > 0 {
				t := time.NewTimer(s.timeout)
				defer t.Stop()
				timer = t.C
			}
		case <-timer:
			return nil, eppErr("no message within the message timeout (%s)", s.timeout)
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the endpoint picker: %w", ctx.Err())
		}
	}
}

// next is recv for a message the protocol still owes: an ended stream is the EPP's failure.
func (s *Stream) next(ctx context.Context, armed <-chan struct{}) (*extprocv3.ProcessingResponse, error) {
	m, err := s.recv(ctx, armed)
	if errors.Is(err, io.EOF) {
		return nil, eppErr("stream ended before the exchange was complete")
	}
	return m, err
}

// Close half-closes the stream and then cancels it, which releases the server side too (an
// EPP runs its end-of-request hooks). It is safe to call more than once.
func (s *Stream) Close() {
	s.closeOnce.Do(func() {
		if !s.sendMu.TryLock() {
			// A send is in flight (possibly blocked by flow control): cancelling ends it.
			s.cancel()
			s.sendMu.Lock()
		}
		_ = s.stream.CloseSend()
		s.sendMu.Unlock()
		s.cancel()
	})
}

// Finish half-closes the stream after a complete exchange and waits for the EPP to end it, so
// its end-of-request work is done when Finish returns; then it releases the stream.
func (s *Stream) Finish(ctx context.Context) error {
	defer s.Close()
	s.sendMu.Lock()
	err := s.stream.CloseSend()
	s.sendMu.Unlock()
	if err != nil {
		return eppErr("half-close: %v", err)
	}
	m, err := s.recv(ctx, armedNow)
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err != nil:
		return err
	default:
		return eppErr("after the response: want the stream to end, got %T", m.GetResponse())
	}
}
