package extproctest

import (
	"errors"
	"io"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrEndStream, returned by a Receive handler, ends the stream cleanly: the fake answered what
// it wanted to and hangs up, as an EPP does after an immediate response.
var ErrEndStream = errors.New("fake EPP ends the stream")

// Receive hands each message of a fake EPP's stream to handle, in order, until the client
// closes its side or cancels the stream (both nil: once the client is gone no one sees the
// fake's status), or handle fails (its error; nil for ErrEndStream). Every fake loops this
// way; each writes only what it answers.
func Receive(srv extprocv3.ExternalProcessor_ProcessServer, handle func(*extprocv3.ProcessingRequest) error) error {
	for {
		req, err := srv.Recv()
		if errors.Is(err, io.EOF) || status.Code(err) == codes.Canceled {
			return nil
		}
		if err != nil {
			return err
		}
		if err := handle(req); err != nil {
			if errors.Is(err, ErrEndStream) {
				return nil
			}
			return err
		}
	}
}
