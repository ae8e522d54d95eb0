package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// errEPP marks every failure that comes from the endpoint picker (stream errors, message
// timeouts, protocol violations) so the handler can apply the failure mode.
var errEPP = errors.New("endpoint picker")

func eppErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errEPP, fmt.Sprintf(format, args...))
}

// session is one ext_proc stream, i.e. one HTTP request. A goroutine drains Recv into a
// channel so that every wait for the EPP's next message can be bounded by the message
// timeout, as Envoy's message_timeout bounds it.
type session struct {
	stream  extprocv3.ExternalProcessor_ProcessClient
	cancel  context.CancelFunc
	msgs    chan *extprocv3.ProcessingResponse
	recvErr chan error
	timeout time.Duration
}

func openSession(ctx context.Context, client extprocv3.ExternalProcessorClient, timeout time.Duration) (*session, error) {
	sctx, cancel := context.WithCancel(ctx)
	stream, err := client.Process(sctx)
	if err != nil {
		cancel()
		return nil, eppErr("open stream: %v", err)
	}
	s := &session{
		stream:  stream,
		cancel:  cancel,
		msgs:    make(chan *extprocv3.ProcessingResponse, 16),
		recvErr: make(chan error, 1),
		timeout: timeout,
	}
	go s.recvLoop(sctx)
	return s, nil
}

func (s *session) recvLoop(ctx context.Context) {
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

func (s *session) send(req *extprocv3.ProcessingRequest) error {
	if err := s.stream.Send(req); err != nil {
		if errors.Is(err, io.EOF) {
			// The server closed the stream; the reason is on the Recv side.
			return eppErr("stream closed by the endpoint picker")
		}
		return eppErr("send: %v", err)
	}
	return nil
}

// next waits for the EPP's next message. The message timeout starts once armed is closed:
// while the upstream is still producing a streamed response its pace is governed by the
// upstream timeouts, not by the EPP's; ctx ends the wait in every case.
func (s *session) next(ctx context.Context, armed <-chan struct{}) (*extprocv3.ProcessingResponse, error) {
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
				return nil, eppErr("stream ended before the exchange was complete")
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

// close half-closes the stream and then cancels it, which releases the server side too.
func (s *session) close() {
	_ = s.stream.CloseSend()
	s.cancel()
}
