package extprocclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// HeadersReply is the EPP's answer to the response headers.
type HeadersReply struct {
	// Immediate replaces the upstream's response when set (the EPP may still answer early
	// here); Mutation is then nil.
	Immediate *extprocv3.ImmediateResponse
	// Mutation is the header mutation to apply to the response headers.
	Mutation *extprocv3.HeaderMutation
}

// ResponseHeaders sends the upstream's response headers, with the endpoint that served the
// request in the envoy.lb metadata_context as Envoy reports it (served "" omits it), and reads
// the EPP's reply. endOfStream says the response has no body.
func (s *Stream) ResponseHeaders(ctx context.Context, headers *corev3.HeaderMap, served string, endOfStream bool) (HeadersReply, error) {
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: headers, EndOfStream: endOfStream}}}
	if served != "" {
		st := &structpb.Struct{Fields: map[string]*structpb.Value{ServedKey: structpb.NewStringValue(served)}}
		req.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{LBNamespace: st}}
	}
	if err := s.send(req); err != nil {
		return HeadersReply{}, err
	}
	m, err := s.next(ctx, armedNow)
	if err != nil {
		return HeadersReply{}, err
	}
	if ir := m.GetImmediateResponse(); ir != nil {
		return HeadersReply{Immediate: ir}, nil
	}
	hr := m.GetResponseHeaders()
	if hr == nil {
		return HeadersReply{}, eppErr("unexpected reply %T while waiting for the response headers reply", m.GetResponse())
	}
	return HeadersReply{Mutation: hr.GetResponse().GetHeaderMutation()}, nil
}

// BodyReadError is a failure to read the upstream's response body (not the EPP's fault).
type BodyReadError struct{ Err error }

func (e *BodyReadError) Error() string { return "reading the response body: " + e.Err.Error() }
func (e *BodyReadError) Unwrap() error { return e.Err }

// RelayResponseBody streams body to the EPP, one frame per read, and hands each body the
// EPP returns to write, in order, until the EPP's streamed end_of_stream. The message timeout
// starts only once body is drained: until then the upstream sets the pace. A failed read
// returns a *BodyReadError once the EPP's replies to what was read before it are written (for
// at most readFailureDrain): an engine that fails a stream often writes its error event in the
// same read that reports the broken connection, and that event is what tells the client why.
// A failed write is returned wrapped; a context that ends while the EPP's reply is awaited
// returns the context's error.
func (s *Stream) RelayResponseBody(ctx context.Context, body io.Reader, write func([]byte) error) error {
	pumpDone := make(chan struct{})
	var pumpErr error
	go func() {
		defer close(pumpDone)
		pumpErr = s.pump(body)
	}()
	waitCtx, stopWaiting := context.WithCancel(ctx)
	defer stopWaiting()
	go func() {
		select {
		case <-pumpDone:
		case <-waitCtx.Done():
			return
		}
		if pumpErr != nil {
			t := time.NewTimer(readFailureDrain)
			defer t.Stop()
			select {
			case <-t.C:
			case <-waitCtx.Done():
			}
			stopWaiting()
		}
	}()
	for {
		m, err := s.next(waitCtx, pumpDone)
		if err != nil {
			select {
			case <-pumpDone:
				if ctxErr := ctx.Err(); errors.Is(ctxErr, context.Canceled) {
					// The caller went away (a client hung up): not the EPP's failure.
					return fmt.Errorf("relaying the response body: %w", ctxErr)
				}
				if pumpErr != nil {
					s.cancel()
					return &BodyReadError{Err: pumpErr}
				}
			default:
			}
			return err
		}
		switch v := m.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_ResponseBody:
			switch mm := v.ResponseBody.GetResponse().GetBodyMutation().GetMutation().(type) {
			case *extprocv3.BodyMutation_StreamedResponse:
				if b := mm.StreamedResponse.GetBody(); len(b) > 0 {
					if werr := write(b); werr != nil {
						s.cancel()
						return fmt.Errorf("writing the response body: %w", werr)
					}
				}
				if mm.StreamedResponse.GetEndOfStream() {
					<-pumpDone
					return nil
				}
			case *extprocv3.BodyMutation_Body:
				if werr := write(mm.Body); werr != nil {
					s.cancel()
					return fmt.Errorf("writing the response body: %w", werr)
				}
			case *extprocv3.BodyMutation_ClearBody:
			default:
				return eppErr("response body reply without a streamed mutation (FULL_DUPLEX_STREAMED expects one)")
			}
		case *extprocv3.ProcessingResponse_ResponseTrailers:
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			return eppErr("immediate response after the response headers were sent (status %d)",
				v.ImmediateResponse.GetStatus().GetCode())
		default:
			return eppErr("unexpected reply %T in the response body phase", m.GetResponse())
		}
	}
}

// responseReadSize bounds one read of the upstream's body; each read becomes one frame, as
// Envoy forwards what arrives instead of re-chunking it.
const responseReadSize = 32 << 10

// readFailureDrain bounds how long, after the upstream's body failed, the EPP's replies to the
// bytes read before the failure are still relayed (they are normally back within
// milliseconds); then the stream is cancelled and the client's response is reset.
const readFailureDrain = 250 * time.Millisecond

// pump sends body to the EPP frame by frame, end_of_stream with the last read. A send failure
// ends it quietly: the receive side reports the stream's failure. A read failure still sends
// the bytes that read returned with it (not as the end of the stream), then returns the error;
// the receive side relays what the EPP sends back for them and then gives up.
func (s *Stream) pump(body io.Reader) error {
	buf := make([]byte, responseReadSize)
	for {
		n, err := body.Read(buf)
		eof := errors.Is(err, io.EOF)
		if err != nil && !eof {
			if n > 0 {
				_ = s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
					ResponseBody: &extprocv3.HttpBody{Body: append([]byte(nil), buf[:n]...)}}})
			}
			return err
		}
		if n > 0 || eof {
			chunk := append([]byte(nil), buf[:n]...)
			if serr := s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{
				ResponseBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: eof}}}); serr != nil {
				return nil
			}
		}
		if eof {
			return nil
		}
	}
}
